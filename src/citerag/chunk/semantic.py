"""Semantic cuts (strategy G): cut a section's body where consecutive sentences stop talking about the same thing.

1. Sentences are the boundary rule's sentences (boundaries.sentence_ranges); a piece shorter than
   MIN_SENTENCE characters ("Table 4.", "e.g.") is glued to the next sentence of its paragraph, so noise
   in a fragment's vector cannot place a cut.
2. Every sentence of the document is embedded in one call; the distance between consecutive sentences
   of a section is 1 - cosine. A cut goes where a distance exceeds the document's `percentile`-th
   percentile of those distances (section starts are cuts anyway).
3. A group longer than `target` characters is split at its largest inner distance, again and again,
   until every piece fits or is one sentence (a sentence longer than `target` is never cut, as in the
   boundary rule).
4. A piece shorter than target // MIN_PIECE_DIVISOR merges into the neighbour it is closer to (the
   smaller distance across the seam), as long as the merged piece still fits in `target`.

Ranges are trimmed and come from the text's own offsets, so `text[start:end]` is the chunk's content.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from citerag.chunk.boundaries import sentence_ranges
from citerag.errors import CiteragError

Embed = Callable[[list[str]], np.ndarray]
Range = tuple[int, int]

DEFAULT_PERCENTILE = 95.0
MIN_SENTENCE = 20
MIN_PIECE_DIVISOR = 4


def sentence_units(text: str, start: int, end: int, language: str | None = None) -> list[Range]:
    """The sentences of [start, end), fragments shorter than MIN_SENTENCE joined to their paragraph's next."""
    units: list[Range] = []
    for paragraph in sentence_ranges(text, start, end, language):
        merged: list[Range] = []
        pending: int | None = None  # start of a short fragment waiting for its next sentence
        for a, b in paragraph:
            a = a if pending is None else pending
            if b - a < MIN_SENTENCE:
                pending = a
                continue
            pending = None
            merged.append((a, b))
        if pending is not None:  # the paragraph ends on a fragment: it joins the sentence before, if any
            b = paragraph[-1][1]
            if merged:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((pending, b))
        units.extend(merged)
    return units


def semantic_ranges(text: str, bodies: Sequence[Range], target: int, percentile: float,
                    embed: Embed, language: str | None = None) -> list[list[Range]]:
    """The chunk ranges of each body [start, end) of one document, in order; `language` as in sentence_ranges."""
    if not 0 < percentile <= 100:
        raise CiteragError(f"percentile must be in (0, 100], not {percentile}")
    units = [sentence_units(text, a, b, language) for a, b in bodies]
    sentences = [text[a:b] for us in units for a, b in us]
    if not sentences:
        return [[] for _ in bodies]
    vectors = np.asarray(embed(sentences), dtype=np.float64)
    if vectors.shape[0] != len(sentences):
        raise CiteragError(f"the encoder returned {vectors.shape[0]} vectors for {len(sentences)} sentences")
    distances: list[np.ndarray] = []
    at = 0
    for us in units:
        v = vectors[at:at + len(us)]
        at += len(us)
        distances.append(1.0 - np.einsum("ij,ij->i", v[:-1], v[1:]))  # unit vectors: 1 - dot is cosine distance
    every = np.concatenate(distances)
    breakpoint_ = float(np.percentile(every, percentile)) if every.size else 0.0
    return [_pieces(us, d, breakpoint_, target) for us, d in zip(units, distances, strict=True)]


def _pieces(units: list[Range], d: np.ndarray, breakpoint_: float, target: int) -> list[Range]:
    """Steps 2-4 for one body: `d[k]` is the distance between units k and k + 1."""
    if not units:
        return []

    def size(i: int, j: int) -> int:  # characters of units i..j-1, the whitespace between them included
        return units[j - 1][1] - units[i][0]

    cuts = [int(k) + 1 for k in np.flatnonzero(d > breakpoint_)]
    pieces: list[Range] = []
    stack: list[Range] = list(reversed(list(zip([0, *cuts], [*cuts, len(units)], strict=True))))
    while stack:  # depth-first, so pieces come out in order
        i, j = stack.pop()
        if size(i, j) <= target or j - i == 1:
            pieces.append((i, j))
            continue
        k = i + 1 + int(np.argmax(d[i:j - 1]))
        stack += [(k, j), (i, k)]
    small = target // MIN_PIECE_DIVISOR
    merged = True
    while merged:
        merged = False
        for n, (i, j) in enumerate(pieces):
            if size(i, j) >= small:
                continue
            options = []  # (distance across the seam, neighbour's index)
            if n > 0 and size(pieces[n - 1][0], j) <= target:
                options.append((d[i - 1], n - 1))
            if n + 1 < len(pieces) and size(i, pieces[n + 1][1]) <= target:
                options.append((d[j - 1], n + 1))
            if options:
                m = min(options)[1]
                lo, hi = min(n, m), max(n, m)
                pieces[lo:hi + 1] = [(pieces[lo][0], pieces[hi][1])]
                merged = True
                break
    return [(units[i][0], units[j - 1][1]) for i, j in pieces]
