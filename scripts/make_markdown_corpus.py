"""Write the Markdown test corpus: the dev set's 14 HTML pages converted to Markdown.

Real Markdown as a team's docs look after a conversion: `# ` / `## ` / `### ` headings, link
syntax, tables, and (a good test for the leading-span rule) navigation and a table of contents
before the first `## ` heading. Run once; the output is committed under tests/data/markdown/.

    pip install markdownify==1.2.3 && python scripts/make_markdown_corpus.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

from markdownify import markdownify

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "eval" / "debian-reference" / "corpus"
OUT = ROOT / "tests" / "data" / "markdown" / "debian-reference"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for html in sorted(SOURCE.glob("*.html")):
        md = markdownify(html.read_text(encoding="utf-8"), heading_style="ATX", strip=["script", "style"])
        (OUT / html.name.replace(".en.html", ".md")).write_text(md, encoding="utf-8")
    shutil.copy(SOURCE / "LICENSE", OUT / "LICENSE")


if __name__ == "__main__":
    main()
