"""Reciprocal rank fusion equals the reference's (reference/rrf.ts), ties included."""

from __future__ import annotations

import json

from citerag.search.fuse import rrf
from corpus_paths import FIXTURES


def test_rrf_equals_reference() -> None:
    data = json.loads((FIXTURES / "rrf.json").read_text(encoding="utf-8"))
    assert len(data["cases"]) >= 10
    for lists, expected in zip(data["cases"], data["fused"], strict=True):
        assert [item for item, _ in rrf(lists, k=60)] == expected


def test_rrf_scores_by_hand() -> None:
    fused = dict(rrf([["a", "b"], ["b", "c"]], k=60))
    assert fused["b"] == 1 / 62 + 1 / 61
    assert fused["a"] == 1 / 61 and fused["c"] == 1 / 62
    assert [x for x, _ in rrf([["a", "b"], ["b", "c"]])] == ["b", "a", "c"]
