"""Strategies A-G, named exactly as measured: a cutting rule, a contextual header, an overlap.

| id | cuts                 | header | overlap |
| A  | blind, every target  | no     | no      |
| B  | blind, every target  | no     | yes     |
| C  | boundaries           | no     | no      |
| D  | boundaries           | no     | yes     |
| E  | boundaries           | yes    | no      |
| F  | boundaries           | yes    | yes     |
| G  | semantic (sentences) | yes    | yes     |

G cuts where consecutive sentences' embeddings drift apart (semantic.py); it needs the collection's
encoder as `embed`, and its percentile is one of the parameters the document stamp records.

A section may carry a `prefix` (a spreadsheet's header row): it follows the header in `text` for every
strategy and never enters `content`; prose sections have none, so their chunks are unaffected.

The header `[Title > Section]` and the overlap (the characters just before a chunk, never across a
section body's start) go into `text`, which is embedded; `content` stays the chunk's own words.

`language` is the document's (ISO 639-1, e.g. citerag.lang.detect of its text, or its stamp): the sentence
fallback of C-G then keeps that language's abbreviations whole ("z. B." for "de"); None (the default) and
languages without rules cut exactly as the reference does. A and B cut blind and ignore it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from citerag.chunk.blind import blind_ranges
from citerag.chunk.boundaries import boundary_ranges
from citerag.chunk.semantic import DEFAULT_PERCENTILE, Embed, semantic_ranges
from citerag.errors import CiteragError
from citerag.text import js_trim
from citerag.types import Chunk, Extracted, Section

Cutter = Callable[[str, int, int, int], Iterator[tuple[int, int]]]


@dataclass(frozen=True)
class Strategy:
    id: str
    cutter: Cutter | None  # None: the semantic cutter, which sees the whole document at once
    blind: bool
    header: bool
    overlap: bool


STRATEGIES = {
    "A": Strategy("A", blind_ranges, blind=True, header=False, overlap=False),
    "B": Strategy("B", blind_ranges, blind=True, header=False, overlap=True),
    "C": Strategy("C", boundary_ranges, blind=False, header=False, overlap=False),
    "D": Strategy("D", boundary_ranges, blind=False, header=False, overlap=True),
    "E": Strategy("E", boundary_ranges, blind=False, header=True, overlap=False),
    "F": Strategy("F", boundary_ranges, blind=False, header=True, overlap=True),
    "G": Strategy("G", None, blind=False, header=True, overlap=True),
}


def strategy_params(strategy: str, target: int, overlap: int,
                    percentile: float = DEFAULT_PERCENTILE) -> dict[str, int | float]:
    """The parameters that change a strategy's output: what the document stamp records."""
    params: dict[str, int | float] = {"target": target, "overlap": overlap if STRATEGIES[strategy].overlap else 0}
    if STRATEGIES[strategy].cutter is None:
        params["percentile"] = percentile
    return params


def header_for(title: str, section: str) -> str:
    return f"{title} > {section}" if section else title


def chunk_extracted(ext: Extracted, strategy: str = "E", target: int = 512, overlap: int = 64, *,
                    embed: Embed | None = None, percentile: float = DEFAULT_PERCENTILE,
                    language: str | None = None) -> list[Chunk]:
    """`embed` (texts -> unit vectors, the collection's encoder) is needed by G only; `percentile` is G's;
    `language` the document's, for the sentence fallback's abbreviations (None: the reference's cuts)."""
    try:
        rule = STRATEGIES[strategy]
    except KeyError:
        raise CiteragError(f"unknown strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}") from None
    text = ext.text
    # Blind cuts see the whole text as one span; the others cut each section's body.
    spans: list[tuple[Section, int]] = (
        [(Section("", 0, 0, len(text)), 0)] if rule.blind else [(s, s.body_start) for s in ext.sections])
    if rule.cutter is None:
        if embed is None:
            raise CiteragError(f"strategy {strategy} cuts on sentence embeddings: it needs the collection's "
                               "encoder (embed)")
        ranges = semantic_ranges(text, [(lo, span.end) for span, lo in spans], target, percentile, embed, language)
    else:
        cutter = partial(boundary_ranges, language=language) if rule.cutter is boundary_ranges else rule.cutter
        ranges = [list(cutter(text, lo, span.end, target)) for span, lo in spans]
    starts = [s.start for s in ext.sections]
    chunks = []
    for (span, lo), cuts in zip(spans, ranges, strict=True):
        for a, b in cuts:
            owner = ext.sections[bisect.bisect_right(starts, a) - 1] if rule.blind and ext.sections else span
            content = text[a:b]
            lead = ""
            if rule.overlap and overlap > 0:
                lead = js_trim(text[max(lo, a - overlap):a])
            header = f"[{header_for(ext.title, owner.title)}]\n" if rule.header else ""
            # The section's prefix (a spreadsheet's header row) is context for the embedding, whatever the
            # strategy; it is left out where the chunk already holds it, and it is never part of content.
            if owner.prefix and owner.prefix not in content:
                header += owner.prefix + "\n"
            body = f"{lead} {content}" if lead else content
            chunks.append(Chunk(header + body, content, owner.title, a, b, header))
    return chunks
