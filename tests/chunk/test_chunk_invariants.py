"""Offset invariants for every strategy over whole real corpora (15 Markdown files, 14 HTML pages).
Strategy G places its cuts with the deterministic fake encoder here (tests/chunk/test_semantic.py has the real one)."""

from __future__ import annotations

import pytest

from citerag.chunk import STRATEGIES, chunk_extracted
from citerag.extract import extractor_for
from citerag.types import Extracted
from corpus_paths import HTML_FILES, MARKDOWN_FILES
from fakes import HashEncoder

CORPUS = MARKDOWN_FILES + HTML_FILES


@pytest.fixture(scope="module")
def extracted() -> list[Extracted]:
    out = []
    for path in CORPUS:
        extractor = extractor_for(path)
        assert extractor is not None
        out.append(extractor.extract(path.read_bytes(), path))
    return out


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_offsets_and_coverage(strategy: str, extracted: list[Extracted]) -> None:
    rule = STRATEGIES[strategy]
    total = 0
    for ext in extracted:
        text = ext.text
        chunks = chunk_extracted(ext, strategy, 512, 64, embed=HashEncoder().encode)
        covered = bytearray(len(text))
        for c in chunks:
            assert text[c.start:c.end] == c.content, (ext.title, c.start)
            assert c.content == c.content.strip() and c.content
            assert c.text.endswith(c.content)
            if rule.header:
                assert c.text.startswith(f"[{ext.title} > {c.section}]\n" if c.section else f"[{ext.title}]\n")
            else:
                assert not c.text.startswith("[" + ext.title)
            if not rule.overlap:
                assert c.text == c.header + c.content
            covered[c.start:c.end] = b"\x01" * (c.end - c.start)
            total += 1
        # Boundary strategies cut section bodies: the heading line itself travels as the section/header.
        headings = bytearray(len(text))
        if not rule.blind:
            for s in ext.sections:
                headings[s.start:s.body_start] = b"\x01" * (s.body_start - s.start)
        missed = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i] and not headings[i]]
        assert not missed, f"{ext.title}: {len(missed)} non-blank characters in no chunk, first at {missed[0]}"
        if rule.blind:
            assert all(len(c.content) <= 512 for c in chunks)
    assert total > 2000


def test_overlap_is_in_text_not_content(extracted: list[Extracted]) -> None:
    ext = extracted[0]
    plain = {(c.start, c.end): c for c in chunk_extracted(ext, "D", 512, 64)}
    for c in chunk_extracted(ext, "F", 512, 64):
        assert plain[(c.start, c.end)].content == c.content
    overlapped = chunk_extracted(ext, "B", 512, 64)
    assert any(len(c.text) > len(c.content) for c in overlapped[1:])
    for prev, cur in zip(overlapped, overlapped[1:], strict=False):
        lead = cur.text[: len(cur.text) - len(cur.content)].strip()
        assert ext.text[prev.start:cur.start].rstrip().endswith(lead)


def test_blind_cuts_destroy_sentences_boundaries_do_not() -> None:
    """A blind cut splits a real dev-set needle; the boundary rule keeps it whole."""
    path = next(p for p in HTML_FILES if p.name == "ch03.en.html")
    ext = extractor_for(path).extract(path.read_bytes(), path)  # type: ignore[union-attr]
    needle = 'Red "●" indicates a "failed" or "error" state.'
    assert needle in ext.text
    assert any(needle in " ".join(c.content.split()) for c in chunk_extracted(ext, "E"))
    at = ext.text.index(needle)
    blind = chunk_extracted(ext, "A")
    whole = any(c.start <= at and at + len(needle) <= c.end for c in blind)
    assert whole == (at // 512 == (at + len(needle) - 1) // 512)


def test_unknown_strategy_is_a_clear_error(extracted: list[Extracted]) -> None:
    from citerag.errors import CiteragError

    with pytest.raises(CiteragError, match="unknown strategy 'Z'"):
        chunk_extracted(extracted[0], "Z")


def test_chunk_title_override() -> None:
    path = MARKDOWN_FILES[0]
    ext = extractor_for(path).extract(path.read_bytes(), path, title="Given")  # type: ignore[union-attr]
    assert all(c.text.startswith("[Given") for c in chunk_extracted(ext, "E"))
