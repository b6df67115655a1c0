"""Exact top-k BM25 without scoring every posting: term-at-a-time MaxScore (Turtle & Flood) over numpy arrays.

Why this shape. Measured on the dev set's chunks replicated to 1M rows (benchmarks/bench_bm25_pruning.py):
what costs in numpy is the number of postings touched and the number of numpy calls, not the elegance of the
traversal. Document-at-a-time WAND or block-max WAND walk one row at a time (a Python loop per row); here every
step is a vector operation over a whole posting list or a whole candidate set. A question's rare words have
short lists and high weights; its common words ("the", "is", "package") have lists of most rows and small
weights. MaxScore scores the rare ("essential") words fully and the common ones only at the rows that can still
reach the top k, found by binary search (few candidates) or a row mask (many). On the dev questions at 1M rows the
essential words hold about a tenth of a question's postings (a perfect theta would make it 8 %); scoring the best
rows exactly early, to raise theta sooner, cost more than it saved, and so did int32 rows. Measured there: about
3.5 times faster than full scoring and as fast as bm25s (its scores precomputed, which N, df and avg changing
with every update rule out here) when caches are cold, 6 times faster when warm.

Bounds. N, df and the mean length (avg) change with every update, so nothing that depends on them is stored. A
posting's weight is idf * (k1 + 1) * r with r = tf / (tf + norm), norm = k1 * (1 - b + b * len / avg); r grows with
tf and falls with len. Each segment keeps per term: max tf and min len/tf (so r <= 1 / (1 + k1 (1 - b) / max tf
+ k1 b min(len/tf) / avg), for any avg), and `peak`, the largest r at the avg a0 of the segment's build (r at avg
a is at most peak * max(1, a / a0): for a > a0, norm(a) >= norm(a0) * a0 / a). The query's bound of a term is
idf * (k1 + 1) * the least of these (at most 1), times the times the word occurs in the query.

The search (`top_k`):
1. Terms in decreasing bound order. suffix[j] = the sum of the bounds of terms j.. . `acc` holds, per row, the sum
   of the weights of the terms scored so far (a lower bound of its score); theta is a lower bound of the k-th best
   score: the k-th largest of acc over some k distinct rows (one term's, or the candidates).
2. Essential terms: while suffix[j] >= theta, term j is scored fully into acc. A row that no scored term holds
   scores at most suffix[j] (the terms left), so once suffix[j] < theta it cannot be in the top k.
3. Candidates: rows already scored whose acc + suffix[j] reaches theta. Each remaining term (largest bound
   first) adds its weights at the candidates only; its bound leaves the suffix; theta rises to the k-th largest acc;
   candidates whose acc + what is left cannot reach theta are dropped.
4. The survivors get their exact scores, summed per query word in the query's order as `scores` sums them (adding
   0.0 where a row lacks the word changes nothing), so each is bit-identical to full scoring; the best k by
   (score desc, chunk id asc) among them are `Rows.best`'s over all rows.

Exactness. Let s(r) be a row's score and s_k the k-th best. A row is dropped only if s(r) < theta <= s_k, strictly:
every row tied with the k-th best is kept, so the tie-break by id is over the same rows as `Rows.best`'s, and every
row kept is scored exactly (step 4). Floating point: steps 1-3 run in float32 (half the memory traffic; measured
20 % faster at 1M rows). With eps the float32 epsilon and m the query's words: `Term.approx` is within 3 eps
(relative) of the exact weight, so acc, a float32 sum of at most m of them, is within (m + 3) eps of the true
partial sum: theta <= (1 + (m + 3) eps) s_k, and s(r) <= (1 + (m + 3) eps) (acc + the bounds left), the bounds
being float64 values within a few 2^-53 of the maxima they bound; a threshold that acc is compared with is rounded
to float32, within eps / 2 of itself, and below theta while positive. A row is dropped only when acc + the bounds
left < theta (1 - slack), slack = 3 (m + 8) eps + SLACK, more than these errors added: then s(r) < s_k.
When pruning cannot pay (few postings, k at least the rows a word matches, too many survivors for binary searches)
`top_k` returns None and the caller scores fully; so it does when b is outside [0, 1] or k1 < 0 (no bounds then).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

SLACK = 1e-9
APPROX = np.float32  # partial sums, bounds and theta; exact scores are float64
ERROR = float(np.finfo(APPROX).eps)  # eps of the module docstring's error bounds
SEARCH_COST = 24  # a binary search costs about this many mask look-ups (measured: 34k keys in 800k rows vs a gather)
# Candidates are a row mask (each step: a look-up per posting of the next term, a pass over the rows) until they are
# fewer than 1/SPARSE of (the next term's postings + the rows), then sorted rows (a binary search each). Measured
# at 1M rows: 256 beats 24 to 128 and 1024 (the binary searches' cache misses cost more than SEARCH_COST suggests).
SPARSE = 256
FULL_COST = 8  # scoring a posting fully costs about this many mask look-ups
FULL_BELOW = 1 << 18  # postings: below, full scoring is as fast (measured at 50,000 and 200,000 rows)


@dataclass
class Bounds:
    """Per term of a segment, what bounds its weights for any N, df and avg (see the module docstring)."""

    max_tf: np.ndarray  # float64
    min_ratio: np.ndarray  # float64: min len / tf
    peak: np.ndarray  # float64: max tf / (tf + k1 (1 - b + b len / a0))
    a0: float
    k1: float
    b: float

    def arrays(self) -> dict[str, np.ndarray]:
        return {"max_tf": self.max_tf, "min_ratio": self.min_ratio, "peak": self.peak,
                "meta": np.array([self.a0, self.k1, self.b], dtype=np.float64)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Bounds:
        a0, k1, b = arrays["meta"].tolist()
        return cls(arrays["max_tf"], arrays["min_ratio"], arrays["peak"], a0, k1, b)

    @classmethod
    def compute(cls, offsets: np.ndarray, rows: np.ndarray, tfs: np.ndarray, lengths: np.ndarray,
                k1: float, b: float, a0: float, chunk: int = 1 << 18) -> Bounds:
        """Bounds of CSR postings (every term with at least one posting), `chunk` postings at a time (small
        temporaries: large ones left the heap grown by 0.6 GB after a 1M-row build)."""
        terms = len(offsets) - 1
        max_tf, min_ratio, peak = np.zeros(terms), np.full(terms, np.inf), np.zeros(terms)
        a0 = a0 if a0 > 0 else 1.0
        t = 0
        while t < terms:
            end = max(t + 1, int(np.searchsorted(offsets, offsets[t] + chunk, "right")) - 1)
            end = min(end, terms)
            a, z = int(offsets[t]), int(offsets[end])
            r = np.asarray(rows[a:z])
            f = np.asarray(tfs[a:z], dtype=np.float64)
            length = lengths[r]
            starts = np.asarray(offsets[t:end]) - a
            max_tf[t:end] = np.maximum.reduceat(f, starts)
            min_ratio[t:end] = np.minimum.reduceat(length / f, starts)
            peak[t:end] = np.maximum.reduceat(f / (f + k1 * (1 - b + b * length / a0)), starts)
            t = end
        return cls(max_tf, min_ratio, peak, a0, k1, b)

    def ratio(self, i: int, k1: float, b: float, avg: float) -> float:
        """An upper bound of tf / (tf + norm) over term i's postings at mean length `avg`."""
        corner = 1.0 / (1.0 + k1 * (1 - b) / self.max_tf[i] + k1 * b * self.min_ratio[i] / avg)
        if (k1, b) == (self.k1, self.b):
            corner = min(corner, float(self.peak[i]) * max(1.0, avg / self.a0))
        return min(1.0, float(corner))


@dataclass
class Stats:
    """What a query needs of the live rows; recomputed after each update (`Bm25Index._stats`)."""

    key: tuple[int, int]
    n: int
    avg: float
    norm: np.ndarray  # per row: k1 * (1 - b + (b * len) / avg), as the reference computes it
    live: np.ndarray
    lengths: np.ndarray
    dead: np.ndarray  # the dead rows, ascending
    k1: float
    b: float
    norm32: np.ndarray = field(init=False)  # for `Term.approx`

    def __post_init__(self) -> None:
        self.norm32 = self.norm.astype(APPROX)

    def dead_between(self, lo: int, hi: int) -> np.ndarray:
        """The dead rows from lo to hi (a posting list's first and last row)."""
        if not len(self.dead):
            return self.dead
        return self.dead[np.searchsorted(self.dead, lo):np.searchsorted(self.dead, hi, "right")]


class Part:
    """One segment's (or the pending rows') postings of a term: rows ascending, dead ones possibly among them."""

    __slots__ = ("rows", "tfs", "dead", "ratio")

    def __init__(self, rows: np.ndarray, tfs: np.ndarray, dead: np.ndarray, ratio: float) -> None:
        self.rows, self.tfs, self.dead, self.ratio = rows, tfs, dead, ratio

    def live_count(self, stats: Stats) -> int:
        if not len(self.dead):
            return len(self.rows)
        if len(self.dead) * SEARCH_COST < len(self.rows):
            pos = np.minimum(np.searchsorted(self.rows, self.dead), len(self.rows) - 1)
            return len(self.rows) - int(np.count_nonzero(self.rows[pos] == self.dead))
        return int(np.count_nonzero(stats.live[self.rows]))

    def live_postings(self, stats: Stats) -> tuple[np.ndarray, np.ndarray]:
        if not len(self.dead):
            return self.rows, self.tfs
        keep = stats.live[self.rows]
        return self.rows[keep], self.tfs[keep]


class Term:
    """A query word's postings over all parts and its idf and bound for this query."""

    def __init__(self, parts: list[Part], count: int, stats: Stats) -> None:
        self.parts, self.count, self.stats = parts, count, stats
        self.size = sum(len(p.rows) for p in parts)
        self.df = sum(p.live_count(stats) for p in parts)
        n, k1 = stats.n, stats.k1
        self.idf = math.log(1 + (n - self.df + 0.5) / (self.df + 0.5))
        self.bound = self.idf * (k1 + 1) * max((p.ratio for p in parts), default=0.0) * count

    def weights(self, rows: np.ndarray, tfs: np.ndarray) -> np.ndarray:
        """The reference's weights, in its operation order (so bit-identical to `Bm25Index.scores`)."""
        f = tfs.astype(np.float64)
        return self.idf * (f * (self.stats.k1 + 1)) / (f + self.stats.norm[rows])

    def approx(self, rows: np.ndarray, tfs: np.ndarray) -> np.ndarray:
        """count * weight in float32, within 3 float32 epsilons of it (relative): what acc and theta are summed from.
        In place where numpy would allocate temporaries (each a fresh mapping, page faults and all, when large)."""
        f = tfs.astype(APPROX)
        den = self.stats.norm32[rows]
        np.add(den, f, out=den)
        np.multiply(f, APPROX(self.idf * (self.stats.k1 + 1) * self.count), out=f)
        return np.divide(f, den, out=f)

    def live_approx(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(rows, approx) of the live postings, per part."""
        out = []
        for p in self.parts:
            rows, tfs = p.live_postings(self.stats)
            out.append((rows, self.approx(rows, tfs)))
        return out

    def live(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(rows, weights) of the live postings, per part."""
        out = []
        for p in self.parts:
            rows, tfs = p.live_postings(self.stats)
            out.append((rows, self.weights(rows, tfs)))
        return out

    def at(self, cand: np.ndarray, exact: bool = True) -> np.ndarray:
        """The weight at each candidate row (ascending, live), 0.0 where the word is absent; `exact` False: approx."""
        out = np.zeros(len(cand), dtype=np.float64 if exact else APPROX)
        for p in self.parts:
            if not len(p.rows) or not len(cand):
                continue
            pos = np.searchsorted(p.rows, cand)
            np.minimum(pos, len(p.rows) - 1, out=pos)
            hit = p.rows[pos] == cand
            pos = pos[hit]
            out[hit] = (self.weights if exact else self.approx)(p.rows[pos], p.tfs[pos])
        return out

    def add_masked(self, mask: np.ndarray, acc: np.ndarray) -> list[np.ndarray]:
        """acc += count * weight at the rows of `mask` (all live) that hold the word; those rows."""
        hits = []
        for p in self.parts:
            pos = np.flatnonzero(mask[p.rows])
            rows = p.rows[pos]
            np.add.at(acc, rows, self.approx(rows, p.tfs[pos]))
            hits.append(rows)
        return hits


def kth(values: np.ndarray, k: int, floor: float = 0.0) -> float:
    """The k-th largest value if above `floor` (else `floor`): theta raised by k distinct rows' lower bounds."""
    if floor > 0:
        values = values[values > floor]  # a comparison per value is cheaper than a partition
    if len(values) < k:
        return floor
    return max(floor, float(np.partition(values, len(values) - k)[len(values) - k]))


def unique(rows: np.ndarray) -> np.ndarray:
    """Sorted distinct rows (np.unique's hash table is many times slower on large int64 arrays)."""
    s = np.sort(rows)
    if len(s) > 1:
        keep = np.empty(len(s), dtype=bool)
        keep[0] = True
        np.not_equal(s[1:], s[:-1], out=keep[1:])
        s = s[keep]
    return s


def exact(tokens: Sequence[str], terms: dict[str, Term], cand: np.ndarray) -> np.ndarray:
    """The scores of these rows (ascending, live) as `Bm25Index.scores` computes them, to the last bit: each word's
    weight by the reference's formula, added in the query's order, a repeated word again (+ 0.0 where absent)."""
    weights = {word: term.at(cand) for word, term in terms.items()}
    score = np.zeros(len(cand))
    for word in tokens:
        if word in weights:
            score += weights[word]
    return score


def top_k(tokens: Sequence[str], terms: dict[str, Term], k: int,
          n_rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Rows that hold the k best (with every row tied with the k-th best) for the query `tokens`, with their exact
    scores; None when pruning would not pay (the caller scores fully). Steps and proof: the module docstring."""
    order = sorted(terms.values(), key=lambda t: (-t.bound, t.size))
    if not order or k >= max(t.df for t in order) or sum(t.size for t in order) < FULL_BELOW:
        return None  # nearly every matching row is returned, or few postings: full scoring is cheaper
    slack = 1 - SLACK - 3 * ERROR * (len(tokens) + 8)
    suffix = [0.0] * (len(order) + 1)
    for j in range(len(order) - 1, -1, -1):
        suffix[j] = suffix[j + 1] + order[j].bound
    acc = np.zeros(n_rows, dtype=APPROX)
    theta, j, touched = 0.0, 0, []
    while j < len(order) and suffix[j] >= theta * slack:  # 2. essential terms
        term = order[j]
        hits = []
        for rows, w in term.live_approx():
            np.add.at(acc, rows, w)
            hits.append(rows)
        touched += hits
        j += 1
        if j < len(order) and suffix[0] - suffix[j] >= suffix[j] * slack:  # else acc (< bounds so far) can't stop it
            theta = kth(acc[np.concatenate(hits) if len(hits) > 1 else hits[0]], k, theta)
    if j == len(order):
        return None  # no pruning: every term was scored in bound order, not the query's
    rem = suffix[j]
    bar = theta * slack - rem
    mask = cand = part = None
    if sum(len(r) for r in touched) * SPARSE >= order[j].size + n_rows:  # 3. candidates: a row mask while many
        mask = acc >= bar if bar > 0 else acc > 0
    else:
        cand = unique(np.concatenate([r[acc[r] >= bar] for r in touched]))
        part = acc[cand]
        theta = kth(part, k, theta)
    while j < len(order):
        term = order[j]
        rem = suffix[j + 1]
        if mask is not None:
            hits = term.add_masked(mask, acc)
            theta = kth(acc[np.concatenate(hits)], k, theta)
            mask &= acc >= theta * slack - rem
            count = int(np.count_nonzero(mask))
            if j + 1 == len(order) or count * SPARSE < order[j + 1].size + n_rows:  # few: sorted rows
                cand = np.flatnonzero(mask)
                part, mask = acc[cand], None
                theta = kth(part, k, theta)
        else:
            assert cand is not None and part is not None
            if len(cand) <= k:
                break
            part += term.at(cand, exact=False)
            theta = kth(part, k, theta)
            keep = part >= theta * slack - rem
            cand, part = cand[keep], part[keep]
        j += 1
    assert cand is not None  # the mask became sorted rows at the last term at the latest
    if len(cand) * len(terms) * SEARCH_COST > FULL_COST * sum(t.size for t in order):
        return None  # 4. exact scores by binary search would cost more than full scoring
    return cand, exact(tokens, terms, cand)
