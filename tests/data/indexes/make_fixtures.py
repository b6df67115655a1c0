"""Build the old-schema index fixtures in this folder with the code that really wrote those schemas.

    .venv/bin/python tests/data/indexes/make_fixtures.py

Each schema version's store module is taken from git history (`git show COMMIT:src/citerag/store/sqlite.py`),
loaded as a throwaway module next to the current citerag package (it only imports `citerag.errors`,
`citerag.store.base` and `citerag.types`, which stay compatible), and used exactly as the indexer used it:
open_store(create=True), add_pending, save_indexed / save_failed. The result is vacuumed and checkpointed so
that one file, `vN/index.sqlite3`, holds everything. `vN/expected.json` records what was written, so the
migration tests compare what a newer citerag reads against what the old one stored, value for value.

The fixtures are committed; rerun this only to rebuild them (the output is deterministic except `updated_at`).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MARKDOWN = ROOT / "tests" / "data" / "markdown" / "debian-reference"

# The commits whose store module wrote each schema version.
SCHEMA_COMMITS = {
    1: "5d1cdb78b7319be495f27c2fd27945d6bb2f1ffb",  # core pipeline: documents without locators
    2: "98fed15e8f305149184085550e1fcc49348b91ae",  # formats with locators: documents.locators
    3: "2d99e73969141bd8e07aebbffa2317ca21cc9e0d",  # application core: meta generation
}
DIM = 8
MODEL = "fixture-encoder-8d"  # not a real encoder: the vectors are random unit vectors


def old_store_module(version: int) -> ModuleType:
    source = subprocess.run(["git", "show", f"{SCHEMA_COMMITS[version]}:src/citerag/store/sqlite.py"],
                            cwd=ROOT, check=True, capture_output=True, text=True).stdout
    folder = Path(tempfile.mkdtemp())
    path = folder / f"citerag_store_v{version}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert str(version) == str(module.SCHEMA_VERSION), module.SCHEMA_VERSION
    return module


def section(md: str, number: str) -> tuple[str, str]:
    """One Markdown section by its number ("1.1.3."), heading line included, up to the next heading of any level.

    Returns the text and the heading's title (the source writes a no-break space after the number).
    """
    text = (MARKDOWN / md).read_text(encoding="utf-8")
    start = text.index(f"\n### {number}") + 1
    end = text.find("\n#", start)
    body = text[start:end + 1 if end >= 0 else len(text)]
    return body, body[:body.index("\n")].lstrip("# ")


def paragraph_chunks(text: str, title: str, section_title: str) -> list[Any]:
    """One chunk per paragraph below the heading line; offsets found in the text, as the chunkers do."""
    from citerag.types import Chunk

    chunks, cursor = [], text.index("\n") + 1
    for para in (p.strip() for p in text[cursor:].split("\n\n")):
        if not para:
            continue
        start = text.index(para, cursor)
        cursor = start + len(para)
        header = f"[{title} > {section_title}]"
        chunks.append(Chunk(f"{header}\n{para}", para, section_title, start, cursor, header))
    return chunks


def unit_vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def build(version: int) -> None:
    from citerag.store.base import ChunkStats
    from citerag.types import Locator

    module = old_store_module(version)
    out = HERE / f"v{version}"
    shutil.rmtree(out, ignore_errors=True)
    work = Path(tempfile.mkdtemp()) / "index"
    store = module.SqliteStore(work, create=True)
    expected: list[dict[str, Any]] = []

    docs = [
        ("/srv/docs/debian-reference/ch01.md", "ch01.md", "Chapter 1. GNU/Linux tutorials",
         *section("ch01.md", "1.1.3."), 1, False),
        ("/srv/docs/debian-reference/ch05.md", "ch05.md", "Chapter 5. Network setup",
         *section("ch05.md", "5.1.3."), 2, version >= 2),
    ]
    for path, name, title, text, section_title, seed, paged in docs:
        # v2 stored the extractor's locator map; pretend the section spans two pages of a print-out.
        page_break = text.index("\n\n", len(text) // 2) + 2
        locators = [Locator(0, page_break, page=41), Locator(page_break, len(text), page=42)] if paged else []
        sha = f"{seed:064x}"
        doc_id = store.add_pending(path, name, sha)
        chunks = paragraph_chunks(text, title, section_title)
        vectors = unit_vectors(len(chunks), seed)
        stamps = {"extractor": "markdown", "extractor_version": "1", "pipeline_version": "1", "strategy": "E",
                  "strategy_params": {"target": 512}, "embedding_model": MODEL, "embedding_dim": DIM}
        stats = ChunkStats([len(c.text) // 4 for c in chunks], [len(c.header) // 4 for c in chunks])
        kwargs: dict[str, Any] = {"locators": locators} if version >= 2 else {}
        store.save_indexed(doc_id, title=title, sha256=sha, stamps=stamps, canonical_text=text, warnings=[],
                           chunks=chunks, vectors=vectors, stats=stats, **kwargs)
        expected.append({"id": doc_id, "source_path": path, "status": "indexed", "title": title, "sha256": sha,
                         "error": None, "stamps": stamps, "canonical_text": text,
                         "locators": [loc.as_json() for loc in kwargs.get("locators", [])],
                         "chunks": [{"content": c.content, "text": c.text, "section": c.section, "start": c.start,
                                     "end": c.end} for c in chunks],
                         "vectors": vectors.tolist(), "tokens": stats.tokens, "header_tokens": stats.header_tokens})
    bad = store.add_pending("/srv/docs/scan.pdf", "scan.pdf", "f" * 64)
    store.save_failed(bad, sha256="f" * 64, stamps={"extractor": "pdf", "embedding_model": MODEL},
                      error="not a PDF: the file starts with b'<html>'")
    expected.append({"id": bad, "source_path": "/srv/docs/scan.pdf", "status": "failed", "title": "",
                     "sha256": "f" * 64, "error": "not a PDF: the file starts with b'<html>'",
                     "stamps": {"extractor": "pdf", "embedding_model": MODEL}, "canonical_text": None,
                     "locators": [], "chunks": [], "vectors": [], "tokens": [], "header_tokens": []})
    store.close()

    db = sqlite3.connect(work / module.DB_NAME, isolation_level=None)
    db.execute("VACUUM")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    out.mkdir(parents=True)
    shutil.copy(work / module.DB_NAME, out / "index.sqlite3")
    (out / "expected.json").write_text(
        json.dumps({"schema_version": version, "embedding_model": MODEL, "documents": expected}, indent=1,
                   ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"v{version}: {(out / 'index.sqlite3').stat().st_size} bytes, {len(expected)} documents")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    for v in SCHEMA_COMMITS:
        build(v)
