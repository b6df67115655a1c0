from __future__ import annotations

import math

import pytest

from citerag.eval.metrics import mrr, ndcg_at, recall_at, recall_curve, summary
from citerag.eval.paired import paired, paired_at
from citerag.eval.stats import sign_test, wilson

# First-correct ranks of five queries; None: the needle is not in the top 20.
RANKS = [1, 3, None, 2, 12]


def test_recall_by_hand() -> None:
    assert [recall_at(RANKS, k).value for k in (1, 4, 8, 20)] == [0.2, 0.6, 0.6, 0.8]
    r4 = recall_at(RANKS, 4)
    assert (r4.k, r4.n) == (3, 5)
    assert (r4.low, r4.high) == wilson(3, 5)


def test_mrr_by_hand() -> None:
    # (1 + 1/3 + 0 + 1/2 + 1/12) / 5 = 23/60
    assert mrr(RANKS).value == pytest.approx(23 / 60)
    assert (mrr(RANKS).low, mrr(RANKS).high) == pytest.approx(wilson(23 / 12, 5))


def test_ndcg_by_hand() -> None:
    # binary relevance, one relevant chunk: 1/log2(rank + 1) within 10, so 12 and None score 0
    expected = (1 + 1 / math.log2(4) + 1 / math.log2(3)) / 5
    assert ndcg_at(RANKS).value == pytest.approx(expected)
    assert ndcg_at([1, 1]).value == 1.0
    assert ndcg_at([11]).value == 0.0


def test_summary_and_curve() -> None:
    s = summary(RANKS)
    assert set(s) == {"recall@1", "recall@4", "recall@8", "recall@20", "mrr", "ndcg@10"}
    curve = recall_curve(RANKS)
    assert len(curve) == 20 and curve[0] == 0.2 and curve[3] == 0.6 and curve[11] == 0.8 and curve[19] == 0.8
    assert curve == sorted(curve)


def test_paired_counts_only_discordant_queries() -> None:
    a = {"q1": 1, "q2": 5, "q3": None, "q4": 2, "only_a": 1}
    b = {"q1": 2, "q2": 1, "q3": 1, "q4": 3, "only_b": 1}
    at1 = paired_at(a, b, 1)
    assert (at1.wins, at1.losses) == (1, 2)  # q1 for a; q2, q3 for b; q4 concordant (both miss)
    assert at1.p == sign_test(1, 2)
    at4 = paired_at(a, b, 4)
    assert (at4.wins, at4.losses) == (0, 2)  # q1, q4 both hit; q2 and q3 only b
    assert [t.k for t in paired(a, b)] == [1, 4, 8, 20]
