"""Dense, BM25 and hybrid (RRF) retrieval over one store snapshot."""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np

from citerag.search.bm25 import BM25
from citerag.search.fuse import rrf
from citerag.store import Snapshot
from citerag.types import Hit

MODES = ("dense", "bm25", "hybrid")


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best scores, best first; ties by index so results are reproducible."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-scores, k - 1)[:k]
    return part[np.lexsort((part, -scores[part]))]


class Retriever:
    """Search over one consistent snapshot; `embed_query` turns a question into the snapshot model's vector
    (the application passes its query cache, shared by every collection on the same model)."""

    def __init__(self, snapshot: Snapshot, embed_query: Callable[[str], np.ndarray], rrf_k: int = 60,
                 fusion_depth: int = 100) -> None:
        self.snapshot = snapshot
        self._embed = embed_query
        self.rrf_k = rrf_k
        self.fusion_depth = fusion_depth

    @cached_property
    def bm25(self) -> BM25:
        return BM25([c.text for c in self.snapshot.chunks])

    def search(self, query: str, mode: str = "hybrid", k: int = 20) -> list[Hit]:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if not self.snapshot.chunks:
            return []
        q = self._embed(query)
        cosine = self.snapshot.vectors @ q
        if mode == "dense":
            ranked = [(int(i), float(cosine[i])) for i in top_k(cosine, k)]
        elif mode == "bm25":
            lexical = self.bm25.scores(query)
            ranked = [(int(i), float(lexical[i])) for i in top_k(lexical, k) if lexical[i] > 0]
        else:
            dense = [int(i) for i in top_k(cosine, self.fusion_depth)]
            lexical = self.bm25.scores(query)
            bm = [int(i) for i in top_k(lexical, self.fusion_depth) if lexical[i] > 0]
            ranked = rrf([dense, bm], k=self.rrf_k)[:k]
        # Every hit, BM25-only ones included, gets its cosine distance from the stored vectors,
        # so the gate treats all hits alike.
        chunks, documents = self.snapshot.chunks, self.snapshot.documents
        return [Hit(chunk=chunks[i], document=documents[chunks[i].document_id], rank=r + 1, score=s,
                    cosine_distance=float(1.0 - cosine[i]))
                for r, (i, s) in enumerate(ranked)]
