"""Each index implementation passes its contract (tests/index/index_contract.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from index_contract import Corpus, LexicalIndexContract, VectorIndexContract, unit

from citerag.index import hnsw
from citerag.index.bm25 import Bm25Index
from citerag.index.exact import ExactIndex
from citerag.index.hnsw import HnswIndex, search_expansion


class TestExactIndex(VectorIndexContract):
    index_type = ExactIndex


class TestHnswIndex(VectorIndexContract):
    index_type = HnswIndex

    def make(self) -> HnswIndex:
        return HnswIndex(ExactIndex(32))


class TestHnswIndexWalkingTheGraphFiltered(TestHnswIndex):
    """A filtered search over more than EXACT_FILTERED_ROWS chunks walks the graph: forced here at any size."""

    @pytest.fixture(autouse=True)
    def _walk(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(hnsw, "EXACT_FILTERED_ROWS", 0)


class TestBm25Index(LexicalIndexContract):
    index_type = Bm25Index


def test_hnsw_extends_its_graph_and_filters_what_was_removed(tmp_path: Path) -> None:
    """A graph holding removed chunks never returns them, and a delta past the threshold joins the graph."""
    corpus, index = Corpus(), HnswIndex(ExactIndex(32))
    for doc in range(1, 11):
        index.add(corpus.document(doc, unit(100, doc)))
    index = HnswIndex.load(tmp_path, index.save(tmp_path))
    assert len(index.graph_ids) == 1000 and not len(index.delta_rows())
    index.remove_documents([3])  # 10 % of the graph dead: filtered at search time, not rebuilt
    corpus.remove(3)
    index.add(corpus.document(11, unit(300, 11)))  # past DELTA_ROWS: absorbed into the graph at the next save
    found = 0
    for seed in range(50):
        q = unit(1, 500 + seed)[0]
        ids = index.search(q, 10)[0].tolist()
        assert set(ids) <= set(corpus.vectors) and len(ids) == 10  # nothing removed comes back, none missing
        found += len(set(ids) & set(corpus.exact(q, 10)[0]))
    assert found / 500 >= 0.9  # a multi-threaded build is not deterministic: recall, not equality
    state = index.save(tmp_path)
    reopened = HnswIndex.load(tmp_path, state)
    assert reopened.graph.expansion_search == search_expansion(1200)  # the file does not keep it: set on load
    assert len(reopened.graph_ids) == 1200 and not len(reopened.delta_rows())
    found = 0
    for seed in range(50):
        q = unit(1, 500 + seed)[0]
        ids, sims = reopened.search(q, 10)
        assert set(ids.tolist()) <= set(corpus.vectors)  # nothing removed comes back
        np.testing.assert_allclose(sims, [corpus.vectors[i] @ q for i in ids.tolist()], atol=1e-6)
        found += len(set(ids.tolist()) & set(corpus.exact(q, 10)[0]))
    # Approximate now: random 32-d vectors are HNSW's hard case; the graph still finds most true neighbours.
    assert found / 500 >= 0.9
