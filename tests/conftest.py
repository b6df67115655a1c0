from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
DEV_SET = ROOT / "eval" / "debian-reference"
DEV_CORPUS = DEV_SET / "corpus"
MARKDOWN_FILES = sorted((DATA / "markdown").rglob("*.md"))
HTML_FILES = sorted(DEV_CORPUS.glob("*.html"))


def reference_chunks() -> dict[str, list[dict[str, Any]]]:
    """The reference chunker's output per Markdown test file (scripts/make_reference_fixtures.py)."""
    with gzip.open(FIXTURES / "chunk_e.json.gz", "rt", encoding="utf-8") as f:
        return dict(json.load(f)["chunks"])


@pytest.fixture(scope="session")
def encoder():  # type: ignore[no-untyped-def]
    from citerag.embed import load_encoder

    return load_encoder("all-MiniLM-L6-v2")


@pytest.fixture()
def small_corpus(tmp_path: Path) -> Path:
    """Three real chapters of the dev set (HTML) and one real Markdown file, in a fresh folder."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("ch08.en.html", "apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    shutil.copy(DATA / "markdown" / "debian-reference" / "ch04.md", folder / "ch04.md")
    return folder
