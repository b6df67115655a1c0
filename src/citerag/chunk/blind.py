"""Blind fixed-size cuts: every `size` characters, whatever they split (strategies A and B)."""

from __future__ import annotations

from collections.abc import Iterator

from citerag.text import trimmed_range


def blind_ranges(text: str, start: int, end: int, size: int) -> Iterator[tuple[int, int]]:
    for a in range(start, end, size):
        r = trimmed_range(text, a, min(a + size, end))
        if r:
            yield r
