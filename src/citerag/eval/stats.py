"""The two statistics the chapter uses: Wilson score intervals and the exact two-sided sign test."""

from __future__ import annotations

import math

from scipy.stats import binomtest

Z95 = 1.959963984540054


def wilson(k: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes out of n (95% by default); (0, 1) when n is 0.

    `k` may be fractional: applied to a mean of per-query scores in [0, 1] (MRR, nDCG) it is
    conservative, since such a score with mean p has a variance of at most p(1 - p).
    """
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= k <= n:
        raise ValueError(f"k={k} must lie in [0, n={n}]")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test on discordant pairs (ties dropped): P under p = 1/2; 1.0 when none."""
    if wins < 0 or losses < 0:
        raise ValueError("wins and losses must be non-negative")
    n = wins + losses
    if n == 0:
        return 1.0
    return float(binomtest(wins, n, 0.5, alternative="two-sided").pvalue)
