"""Strategy E agrees chunk for chunk with the published reference (fixtures made by
scripts/make_reference_fixtures.py), except for the leading text the reference drops."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from citerag.chunk import chunk_extracted
from citerag.extract.markdown import MarkdownExtractor
from corpus_paths import MARKDOWN_FILES, reference_chunks

REFERENCE = reference_chunks()


def _chunks(path: Path) -> tuple[list[dict[str, Any]], int | None, str]:
    ext = MarkdownExtractor().extract(path.read_bytes(), path, title=path.stem)
    first_heading = next((s.start for s in ext.sections if s.title or s.start > 0), None)
    return [c.as_json() for c in chunk_extracted(ext, "E", 512)], first_heading, ext.text


def test_fixtures_cover_every_markdown_file() -> None:
    assert sorted(p.name for p in MARKDOWN_FILES) == sorted(REFERENCE)
    assert sum(len(v) for v in REFERENCE.values()) > 1500


@pytest.mark.parametrize("path", MARKDOWN_FILES, ids=lambda p: p.name)
def test_strategy_e_matches_reference(path: Path) -> None:
    mine, first_heading, text = _chunks(path)
    # The only permitted difference: chunks of the text before the first `## ` heading.
    leading = [c for c in mine if first_heading is not None and c["start"] < first_heading]
    assert all(c["section"] == "" for c in leading)
    assert mine[len(leading):] == REFERENCE[path.name]
    for c in leading:
        assert text[c["start"]:c["end"]] == c["content"]
        assert c["text"].startswith(f"[{path.stem}]\n")


def test_leading_text_is_kept_not_dropped() -> None:
    """The reference drops everything before the first `## ` heading; citerag keeps it."""
    kept = 0
    for path in MARKDOWN_FILES:
        mine, first_heading, text = _chunks(path)
        if first_heading:
            leading = "".join(text[c["start"]:c["end"]] for c in mine if c["start"] < first_heading)
            assert "".join(text[:first_heading].split()) == "".join(leading.split())
            kept += len(text[:first_heading].strip())
    assert kept > 10000  # the navigation and tables of contents of 15 real files
