"""Golden fixtures from the published reference (../shared/reference, Node.js 20): run once, commit output.

The reference code itself is not copied into the project; only its outputs on real text are:
  tests/fixtures/chunk_e.json.gz  reference chunkDocument(doc, title, 512) for every Markdown test file
  tests/fixtures/bm25.json        reference BM25 scores for real chunks x the dev-set queries
  tests/fixtures/rrf.json         reference rrf() on rankings from the dev set

JavaScript offsets count UTF-16 code units, Python's count code points; files with characters outside
the BMP are converted (none occur in the current corpus, which is checked).

    python scripts/make_reference_fixtures.py [--reference ../shared/reference]
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKDOWN = ROOT / "tests" / "data" / "markdown"
FIXTURES = ROOT / "tests" / "fixtures"
QUESTIONS = ROOT / "eval" / "debian-reference" / "questions.jsonl"


def utf16_to_codepoint(text: str) -> list[int]:
    """Map each UTF-16 offset to a code point offset."""
    out = []
    for i, ch in enumerate(text):
        out.extend([i] * (2 if ord(ch) > 0xFFFF else 1))
    out.append(len(text))
    return out


def node(reference: Path, script: str, *args: str) -> object:
    run = subprocess.run(["node", str(reference / script), *args], capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", type=Path, default=ROOT.parent / "shared" / "reference")
    ref = parser.parse_args().reference
    FIXTURES.mkdir(parents=True, exist_ok=True)

    chunks: dict[str, list[dict[str, object]]] = {}
    for md in sorted(MARKDOWN.rglob("*.md")):
        text = md.read_text(encoding="utf-8")
        to_cp = utf16_to_codepoint(text)
        out = node(ref, "run_chunk.js", str(md), md.stem, "512")
        assert isinstance(out, list)
        chunks[md.name] = [{"text": c["text"], "content": c["content"], "section": c["section"],
                            "start": to_cp[c["from"]], "end": to_cp[c["to"]]} for c in out]
    with gzip.open(FIXTURES / "chunk_e.json.gz", "wt", encoding="utf-8") as f:
        json.dump({"title": "file stem", "target": 512, "chunks": chunks}, f)

    # BM25 over real chunk texts (the reference chunks of three chapters) and the 80 dev queries, plus
    # edge cases: repeated words, no known word, punctuation only, upper case.
    docs = [c["text"] for name in ("ch03.md", "ch05.md", "ch08.md") for c in chunks[name]]
    queries = [json.loads(line)["query"] for line in QUESTIONS.read_text(encoding="utf-8").splitlines()]
    queries += ["systemd systemd systemd", "zzzz qqqq", "?!", "MTU PING -M DO", ""]
    with tempfile.TemporaryDirectory() as tmp:
        d, q = Path(tmp) / "docs.json", Path(tmp) / "queries.json"
        d.write_text(json.dumps(docs))
        q.write_text(json.dumps(queries))
        scores = node(ref, "run_bm25.js", str(d), str(q))
    (FIXTURES / "bm25.json").write_text(json.dumps({"docs": docs, "queries": queries, "scores": scores}))

    # RRF: rankings by BM25 and by reversed BM25 of each query, fused by the reference.
    cases = []
    for qi in range(0, 80, 8):
        row = scores[qi]  # type: ignore[index]
        by_score = sorted(range(len(row)), key=lambda i: -row[i])[:30]
        cases.append([by_score, list(reversed(by_score))[:20], by_score[5:25:2]])
    cases.append([[1, 2, 3], [3, 2, 1]])  # ties: first-seen order must win
    cases.append([[], [7]])
    rrf_js = (
        "const {rrf}=require(process.argv[1]);const c=JSON.parse(require('fs').readFileSync(0,'utf8'));"
        "process.stdout.write(JSON.stringify(c.map(l=>rrf(l,60))));"
    )
    fused = subprocess.run(["node", "-e", rrf_js, str(ref / "rrf.js")], input=json.dumps(cases),
                           capture_output=True, text=True, check=True)
    (FIXTURES / "rrf.json").write_text(json.dumps({"cases": cases, "fused": json.loads(fused.stdout)}))


if __name__ == "__main__":
    main()
