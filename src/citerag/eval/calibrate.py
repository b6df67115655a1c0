"""Threshold calibration under the real gate (citerag.search.gate: at most 4 hits under the cut).

For each query we keep the cosine distances of its retrieved hits in rank order and which ranks hold the
needle. At a threshold t the gate keeps the first `max_sources` hits with distance < t:
- an answerable query is *refused* when nothing is kept; *supported* when a kept hit holds the needle;
- an out-of-domain query is a *bluff* when anything is kept.
The best hit's distance (the smallest among the retrieved hits) decides refusal, whatever the ranking.
The recommended threshold minimises  cost_ratio * bluff_rate + refusal_rate  (rates, so the two query
sets weigh the same whatever their sizes), ties going to fewer bluffs; of the range of thresholds that
achieve it, the middle (rounded to 3 decimals).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from citerag.search.gate import gate
from citerag.types import Hit


@dataclass(frozen=True)
class Scored:
    """One query's retrieval as the gate sees it."""

    distances: list[float]  # per hit, rank order
    correct: list[int]  # 1-based ranks holding the needle (empty for OOD queries)

    @property
    def best(self) -> float | None:
        return min(self.distances) if self.distances else None


@dataclass(frozen=True)
class SweepRow:
    threshold: float
    refused: int
    supported: int
    bluffs: int
    cost: float

    def as_json(self) -> dict[str, float]:
        return {"threshold": round(self.threshold, 6), "refused": self.refused, "supported": self.supported,
                "bluffs": self.bluffs, "cost": round(self.cost, 6)}


def _kept_ranks(s: Scored, threshold: float, max_sources: int) -> list[int]:
    # The real gate over stand-in hits: only rank and distance matter to it.
    hits = [Hit(chunk=None, document=None, rank=r, score=0.0, cosine_distance=d)  # type: ignore[arg-type]
            for r, d in enumerate(s.distances, 1)]
    return [h.rank for h in gate(hits, threshold, max_sources)]


def sweep_row(inside: Sequence[Scored], ood: Sequence[Scored], threshold: float, cost_ratio: float = 3.0,
              max_sources: int = 4) -> SweepRow:
    refused = supported = 0
    for s in inside:
        kept = _kept_ranks(s, threshold, max_sources)
        refused += not kept
        supported += bool(set(kept) & set(s.correct))
    bluffs = sum(bool(_kept_ranks(s, threshold, max_sources)) for s in ood)
    cost = cost_ratio * (bluffs / len(ood) if ood else 0.0) + (refused / len(inside) if inside else 0.0)
    return SweepRow(threshold, refused, supported, bluffs, cost)


def grid(inside: Sequence[Scored], ood: Sequence[Scored], steps: int = 80) -> list[float]:
    """Evenly spaced thresholds over the observed best distances, 0.05 either side (models differ: E5's
    distances sit far lower than MiniLM's), on a 0.0025 lattice so sweeps of one model line up."""
    best = [b for s in [*inside, *ood] if (b := s.best) is not None] or [0.0, 1.0]
    lo = max(0.0, math.floor((min(best) - 0.05) * 400) / 400)
    hi = min(2.0, math.ceil((max(best) + 0.05) * 400) / 400)
    step = max(0.0025, math.ceil((hi - lo) / steps * 400) / 400)
    return [round(lo + i * step, 6) for i in range(int((hi - lo) / step + 1e-9) + 1)]


def gaps(inside: Sequence[Scored], ood: Sequence[Scored]) -> list[tuple[float, float]]:
    """The intervals between consecutive distinct best distances, plus one below and one above all: the
    cost is constant for thresholds inside each, so their midpoints are all the thresholds that differ."""
    best = sorted({b for s in [*inside, *ood] if (b := s.best) is not None})
    if not best:
        return [(0.0, 1.0)]
    return [(best[0] - 0.02, best[0]), *zip(best, best[1:], strict=False), (best[-1], best[-1] + 0.02)]


@dataclass(frozen=True)
class Calibration:
    inside_best: list[float]
    ood_best: list[float]
    worst_inside: float | None  # the largest best-hit distance of an answerable query
    best_ood: float | None  # the smallest best-hit distance of an out-of-domain query
    sweep: list[SweepRow]
    recommended: SweepRow
    cost_ratio: float
    reference: SweepRow | None  # the sweep at a given threshold (the configured one)


def calibrate(inside: Sequence[Scored], ood: Sequence[Scored], cost_ratio: float = 3.0, max_sources: int = 4,
              reference_threshold: float | None = None) -> Calibration:
    spans = gaps(inside, ood)
    keys = [(round(r.cost, 9), r.bluffs) for r in
            (sweep_row(inside, ood, (a + b) / 2, cost_ratio, max_sources) for a, b in spans)]
    # The cheapest run of adjacent gaps (the lowest such run on a tie), and its middle: the widest margin
    # to the answerable query below it and the out-of-domain query above it.
    first = keys.index(min(keys))
    last = first
    while last + 1 < len(keys) and keys[last + 1] == keys[first]:
        last += 1
    chosen = round((spans[first][0] + spans[last][1]) / 2, 3)
    inside_best = [b for s in inside if (b := s.best) is not None]
    ood_best = [b for s in ood if (b := s.best) is not None]
    ref = (sweep_row(inside, ood, reference_threshold, cost_ratio, max_sources)
           if reference_threshold is not None else None)
    return Calibration(inside_best, ood_best, max(inside_best, default=None), min(ood_best, default=None),
                       [sweep_row(inside, ood, t, cost_ratio, max_sources) for t in grid(inside, ood)],
                       sweep_row(inside, ood, chosen, cost_ratio, max_sources),
                       cost_ratio, ref)
