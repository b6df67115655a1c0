"""Cut on paragraph boundaries, falling back to sentences inside an over-long paragraph.

This is the published reference rule (reference/chunk.ts), written out in Python because it is the
core of citerag's chunk-for-chunk conformance: merge whole paragraphs while the run stays within
`target` characters; a paragraph longer than `target` is cut into runs of whole sentences.
Offsets are found in the text, never accumulated from lengths.

`language="de"` (the document's detected language) keeps German abbreviations ("z. B.", "bzw.") inside their
sentence (citerag.abbreviations); any other language, and None (the default), cut as the reference does.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from citerag.abbreviations import continues
from citerag.text import JS_WHITESPACE, JS_WS_CLASS, trimmed_range

_PARAGRAPH = re.compile(r"[^\n](?:[^\n]|\n(?!\n))*")
_SENTENCE = re.compile(rf"[^.!?]*[.!?]*{JS_WS_CLASS}*")


def _sentences(body: str, pf: int, pt: int, language: str | None) -> Iterator[tuple[int, int]]:
    """The reference's sentence pieces of body[pf:pt] (each with its trailing whitespace), those that end in an
    abbreviation of `language` joined to the next."""
    open_: int | None = None
    for sm in _SENTENCE.finditer(body, pf, pt):
        if not sm.group():
            continue
        sf, st = sm.start(), sm.end()
        if open_ is None:
            open_ = sf
        if language is not None:
            stop = len(body[sf:st].rstrip(JS_WHITESPACE)) + sf
            if continues(body[open_:stop], body[stop:pt], language):
                continue
        yield open_, st
        open_ = None
    if open_ is not None:
        yield open_, pt


def _packed(ranges: Iterable[tuple[int, int]], target: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges joined while the join stays within `target` characters (one alone may be longer)."""
    cur: tuple[int, int] | None = None
    for f, t in ranges:
        if cur and t - cur[0] > target:
            yield cur
            cur = None
        cur = (cur[0], t) if cur else (f, t)
    if cur:
        yield cur


def boundary_ranges(text: str, start: int, end: int, target: int,
                    language: str | None = None) -> Iterator[tuple[int, int]]:
    """Trimmed, non-blank (start, end) ranges of `text` covering the non-blank text of [start, end)."""
    body = text[start:end]

    def emit(ranges: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
        for a, b in ranges:
            r = trimmed_range(text, start + a, start + b)
            if r:
                yield r

    paragraphs: list[tuple[int, int]] = []  # packed together until a huge one, which is cut in whole sentences
    for m in _PARAGRAPH.finditer(body):
        pf, pt = m.start(), m.end()
        if pt - pf > target:
            yield from emit(_packed(paragraphs, target))
            paragraphs = []
            yield from emit(_packed(_sentences(body, pf, pt, language), target))
        else:
            paragraphs.append((pf, pt))
    yield from emit(_packed(paragraphs, target))


def sentence_ranges(text: str, start: int, end: int,
                    language: str | None = None) -> Iterator[list[tuple[int, int]]]:
    """The trimmed, non-blank sentence ranges of [start, end), one list per paragraph: the units the
    rule above falls back to inside an over-long paragraph, for any paragraph."""
    body = text[start:end]
    for m in _PARAGRAPH.finditer(body):
        ranges = [trimmed_range(text, start + sf, start + st)
                  for sf, st in _sentences(body, m.start(), m.end(), language)]
        found = [r for r in ranges if r]
        if found:
            yield found
