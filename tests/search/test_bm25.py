"""BM25 scores equal the reference's (reference/bm25.ts) to 1e-9 on real chunks and the dev queries."""

from __future__ import annotations

import json
import math

import numpy as np

from citerag.search.bm25 import BM25, tokenize
from corpus_paths import FIXTURES

FIXTURE = json.loads((FIXTURES / "bm25.json").read_text(encoding="utf-8"))


def test_scores_equal_reference() -> None:
    bm = BM25(FIXTURE["docs"])
    assert len(FIXTURE["docs"]) > 200 and len(FIXTURE["queries"]) == 85
    worst = 0.0
    for query, expected in zip(FIXTURE["queries"], FIXTURE["scores"], strict=True):
        got = bm.scores(query)
        worst = max(worst, float(np.max(np.abs(got - np.asarray(expected)))))
    assert worst <= 1e-9
    assert any(max(row) > 10 for row in FIXTURE["scores"])  # the fixture is not all zeros


def test_formula_by_hand() -> None:
    docs = ["the cat sat", "the dog", "cat cat cat dog"]
    bm = BM25(docs)
    n, avg = 3, (3 + 2 + 4) / 3
    idf_cat = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))
    expected = idf_cat * (3 * 2.2) / (3 + 1.2 * (1 - 0.75 + 0.75 * 4 / avg))
    assert math.isclose(bm.scores("cat")[2], expected, rel_tol=1e-12)
    assert bm.scores("cat cat")[2] == 2 * bm.scores("cat")[2]  # repeated query words count again
    assert bm.scores("bird").tolist() == [0.0, 0.0, 0.0]


def test_tokenizer_is_the_reference_rule() -> None:
    assert tokenize("Use `ping -M do` on eth0; MTU=1500!") == ["use", "ping", "m", "do", "on", "eth0", "mtu", "1500"]
    assert tokenize("Ünïcode café") == ["n", "code", "caf"]


def test_empty_corpus() -> None:
    assert BM25([]).scores("anything").tolist() == []
