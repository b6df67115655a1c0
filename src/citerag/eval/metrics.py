"""Ranking metrics over the rank of the first correct chunk per query (None: not in the top k).

- Recall@k: share of queries whose first correct chunk is at rank <= k.
- MRR: mean of 1 / rank of the first correct chunk, 0 when none was retrieved (so MRR@depth).
- nDCG@10: binary relevance, only the first correct chunk counted as relevant (one needle, one
  relevant item), so the ideal DCG is 1 and nDCG@10 = 1 / log2(rank + 1) for rank <= 10, else 0.
- budget@B: share of queries whose needle is reached within B characters of quoted content, read in rank
  order up to and including the first correct chunk (R@k rewards large chunks; a reader pays per character).
Each comes with a Wilson 95% interval (for MRR and nDCG, applied to the mean score; see stats.wilson).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from citerag.eval.stats import wilson

Ranks = Sequence[int | None]
Chars = Sequence[int | None]  # characters read up to the first correct chunk; None: not in the top DEPTH
RECALL_KS = (1, 4, 8, 20)
NDCG_K = 10
BUDGETS = (1000, 2000, 4000)  # characters: roughly a paragraph, a page, two pages of quoted text


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float
    k: float  # successes (or the sum of per-query scores)
    n: int

    def as_json(self) -> dict[str, float]:
        return {"value": round(self.value, 6), "low": round(self.low, 6), "high": round(self.high, 6),
                "k": round(self.k, 6), "n": self.n}

    def show(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}]"


def estimate(k: float, n: int) -> Estimate:
    low, high = wilson(k, n)
    return Estimate(k / n if n else 0.0, low, high, k, n)


def hit_at(rank: int | None, k: int) -> bool:
    return rank is not None and rank <= k


def recall_at(ranks: Ranks, k: int) -> Estimate:
    return estimate(sum(hit_at(r, k) for r in ranks), len(ranks))


def reciprocal_rank(rank: int | None) -> float:
    return 1.0 / rank if rank else 0.0


def mrr(ranks: Ranks) -> Estimate:
    return estimate(sum(reciprocal_rank(r) for r in ranks), len(ranks))


def ndcg_gain(rank: int | None, k: int = NDCG_K) -> float:
    return 1.0 / math.log2(rank + 1) if rank is not None and rank <= k else 0.0


def ndcg_at(ranks: Ranks, k: int = NDCG_K) -> Estimate:
    return estimate(sum(ndcg_gain(r, k) for r in ranks), len(ranks))


def recall_curve(ranks: Ranks, depth: int = 20) -> list[float]:
    """Recall@k for k = 1..depth."""
    n = len(ranks) or 1
    return [sum(hit_at(r, k) for r in ranks) / n for k in range(1, depth + 1)]


def summary(ranks: Ranks) -> dict[str, Estimate]:
    out = {f"recall@{k}": recall_at(ranks, k) for k in RECALL_KS}
    out["mrr"] = mrr(ranks)
    out[f"ndcg@{NDCG_K}"] = ndcg_at(ranks)
    return out


def chars_to_needle(lengths: Sequence[int], rank: int | None) -> int | None:
    """Characters read in rank order up to and including the first correct chunk: `lengths` are the quoted
    contents' lengths in rank order, `rank` 1-based (None: no correct chunk, so no budget reaches it)."""
    if rank is None:
        return None
    if not 1 <= rank <= len(lengths):
        raise ValueError(f"rank {rank} outside the {len(lengths)} hits")
    return sum(lengths[:rank])


def within(chars: int | None, budget: int) -> bool:
    return chars is not None and chars <= budget


def budget_at(chars: Chars, budget: int) -> Estimate:
    return estimate(sum(within(c, budget) for c in chars), len(chars))


def budget_summary(chars: Chars, budgets: Sequence[int] = BUDGETS) -> dict[str, Estimate]:
    """budget@B for each B: reported beside `summary`, under its own names so no Recall@k key changes."""
    return {f"budget@{b}": budget_at(chars, b) for b in budgets}


def latency(seconds: Sequence[float]) -> dict[str, Any]:
    """Milliseconds: count, p50, p95, p99 (numpy's linear interpolation)."""
    if not seconds:
        return {"n": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None}
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    return {"n": len(seconds), **{f"p{q}_ms": round(float(np.percentile(ms, q)), 3) for q in (50, 95, 99)}}
