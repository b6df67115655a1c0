"""Reciprocal rank fusion (k = 60): ranks, not scores, so nothing to calibrate."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

T = TypeVar("T", bound=Hashable)


def rrf(lists: Sequence[Sequence[T]], k: int = 60) -> list[tuple[T, float]]:
    """Fused (id, score), best first; ties keep first-seen order, as the reference's stable sort."""
    acc: dict[T, float] = {}
    for ranked in lists:
        for r, item in enumerate(ranked):
            acc[item] = acc.get(item, 0.0) + 1 / (k + r + 1)
    return sorted(acc.items(), key=lambda kv: -kv[1])
