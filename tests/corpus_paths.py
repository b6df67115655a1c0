"""Where the tests' real data lives. A plain module (not conftest) so no other conftest.py can shadow it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

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
