"""Paired comparisons: two configurations answered the same queries, so count only the discordant
ones (one finds the needle within k, the other does not) and apply the exact sign test.

The same at a context budget: on `chars` (characters of quoted content read up to the first correct chunk),
fewer is better, and a miss (None) costs more than any hit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from citerag.eval.metrics import RECALL_KS, hit_at, reciprocal_rank, within
from citerag.eval.stats import sign_test


@dataclass(frozen=True)
class Paired:
    k: int
    wins: int  # queries where `a` hits within k and `b` does not
    losses: int  # the reverse
    p: float

    def as_json(self) -> dict[str, float]:
        return {"k": self.k, "wins": self.wins, "losses": self.losses, "p": round(self.p, 6)}


def paired_at(a: Mapping[str, int | None], b: Mapping[str, int | None], k: int) -> Paired:
    """`a` and `b` map query id to the rank of the first correct chunk; only shared ids are compared."""
    shared = a.keys() & b.keys()
    wins = sum(hit_at(a[q], k) and not hit_at(b[q], k) for q in shared)
    losses = sum(hit_at(b[q], k) and not hit_at(a[q], k) for q in shared)
    return Paired(k, wins, losses, sign_test(wins, losses))


def paired(a: Mapping[str, int | None], b: Mapping[str, int | None],
           ks: tuple[int, ...] = RECALL_KS) -> list[Paired]:
    return [paired_at(a, b, k) for k in ks]


def paired_rr(a: Mapping[str, int | None], b: Mapping[str, int | None]) -> dict[str, float]:
    """Sign test on reciprocal rank: wins are queries where `a` ranks the first correct chunk higher (its RR is
    larger), losses the reverse; queries with equal RR (both missed, or the same rank) are left out."""
    shared = a.keys() & b.keys()
    wins = sum(reciprocal_rank(a[q]) > reciprocal_rank(b[q]) for q in shared)
    losses = sum(reciprocal_rank(a[q]) < reciprocal_rank(b[q]) for q in shared)
    return {"wins": wins, "losses": losses, "p": round(sign_test(wins, losses), 6)}


def _cost(chars: int | None) -> float:
    return math.inf if chars is None else float(chars)


def paired_chars(a: Mapping[str, int | None], b: Mapping[str, int | None]) -> dict[str, float]:
    """Sign test on characters read to the needle: wins are queries where `a` reaches it in fewer characters,
    losses the reverse; a miss counts as infinitely many, so both missed (or the same count) is a tie, left out."""
    shared = a.keys() & b.keys()
    wins = sum(_cost(a[q]) < _cost(b[q]) for q in shared)
    losses = sum(_cost(a[q]) > _cost(b[q]) for q in shared)
    return {"wins": wins, "losses": losses, "p": round(sign_test(wins, losses), 6)}


def paired_budget(a: Mapping[str, int | None], b: Mapping[str, int | None], budget: int) -> Paired:
    """As `paired_at`, at a context budget: wins are queries `a` answers within `budget` characters and `b`
    does not (`Paired.k` holds the budget)."""
    shared = a.keys() & b.keys()
    wins = sum(within(a[q], budget) and not within(b[q], budget) for q in shared)
    losses = sum(within(b[q], budget) and not within(a[q], budget) for q in shared)
    return Paired(budget, wins, losses, sign_test(wins, losses))
