"""Shared helpers for the format tests (imported by module name: tests/extract is on sys.path)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from citerag.chunk import chunk_extracted
from citerag.extract import extractor_for
from citerag.types import Chunk, Extracted

TESTS = Path(__file__).resolve().parent.parent
SAMPLES = TESTS / "data" / "samples"
ROOT = TESTS.parent
DEV_SET = ROOT / "eval" / "debian-reference"
DEBIAN_PDF = DEV_SET / "corpus" / "debian-reference.en.pdf"


def ws(s: str) -> str:
    return re.sub(r"\s+", " ", s)


def extract(path: Path, data: bytes | None = None) -> Extracted:
    extractor = extractor_for(path)
    assert extractor is not None, path
    return extractor.extract(path.read_bytes() if data is None else data, path)


@cache
def sample(name: str) -> Extracted:
    return extract(SAMPLES / name)


def check_contract(ext: Extracted, strategies: str = "ACE") -> dict[str, list[Chunk]]:
    """Offsets hold for every chunk of every strategy; sections and locators are ordered and in range."""
    n = len(ext.text)
    assert ext.text and ext.sections
    for a, b in zip(ext.sections, ext.sections[1:], strict=False):
        assert a.end == b.start and a.start <= a.body_start <= a.end
    assert ext.sections[0].start == 0 and ext.sections[-1].end == n
    for a, b in zip(ext.locators, ext.locators[1:], strict=False):
        assert a.end <= b.start, (a, b)
    for loc in ext.locators:
        assert 0 <= loc.start < loc.end <= n
    out = {}
    for s in strategies:
        chunks = chunk_extracted(ext, s)
        assert chunks
        for c in chunks:
            assert ext.text[c.start:c.end] == c.content
            assert c.content in c.text
        out[s] = chunks
    return out


def find(text: str, needle: str) -> tuple[int, int]:
    """The span of `needle` in `text`, whitespace runs matching any whitespace."""
    pattern = r"\s+".join(re.escape(w) for w in needle.split())
    m = re.search(pattern, text)
    assert m, needle
    return m.start(), m.end()
