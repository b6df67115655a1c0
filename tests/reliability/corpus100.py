"""A folder of 100 real documents for the reliability tests: the Debian Reference's Markdown chapters
(tests/data/markdown/debian-reference, GPL-2+, see its LICENSE) cut at their `###` sections into files of
a few kilobytes, so that ingestion runs long enough to be killed at many moments and each document is small
enough to check whole."""

from __future__ import annotations

import re
from pathlib import Path

from corpus_paths import DATA

SOURCE = DATA / "markdown" / "debian-reference"
COUNT = 100
_SECTION = re.compile(r"^(?=### )", re.M)


def sections() -> list[tuple[str, str]]:
    """(name, text) for every section of at least 400 characters, in chapter order."""
    out: list[tuple[str, str]] = []
    for chapter in sorted(SOURCE.glob("*.md")):
        parts = [p for p in _SECTION.split(chapter.read_text(encoding="utf-8")) if len(p.strip()) >= 400]
        out.extend((f"{chapter.stem}-{i:03d}.md", p.strip() + "\n") for i, p in enumerate(parts))
    return out


def make_corpus(folder: Path, count: int = COUNT) -> dict[str, str]:
    """Write `count` documents, spread evenly over the chapters' sections; returns name -> text."""
    every = sections()
    if len(every) < count:
        raise RuntimeError(f"only {len(every)} sections: cannot make {count} documents")
    step = len(every) / count
    chosen = [every[int(i * step)] for i in range(count)]
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in chosen:
        (folder / name).write_text(text, encoding="utf-8")
    return dict(chosen)
