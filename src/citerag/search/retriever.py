"""Dense, BM25, hybrid (RRF) and adaptive ranking over a collection's search indexes, hits read from one store view.

Adaptive (the default) ranks by cosine plus BM25 weighed by the question's lexical evidence (search/fusion.py),
except that chunks holding the query's words verbatim (search/phrase.py) come first: a pasted phrase, error
message or identifier finds its passage."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from citerag.index.analyzer import REFERENCE
from citerag.index.base import Allowed, LexicalIndex, VectorIndex
from citerag.search.fuse import rrf
from citerag.search.fusion import LEXICAL_WEIGHT, evidence, fused_order
from citerag.search.phrase import SHORTLIST, exact_matches
from citerag.settings import MODES
from citerag.store.base import StoreView
from citerag.trace import tracer
from citerag.types import Hit


class Retriever:
    """Ranks with the indexes (caught up to `view.generation` by the caller) and reads the hits' chunks and
    documents from the same view, so a hit never pairs one version's chunk with another's document.

    `embed_query` turns a question into the indexes' model's vector (the application passes its query cache);
    `rank_vector` turns that vector into the one the adaptive mode ranks with (a fused encoder's models weighted
    for the question's language, embed/fused.ranking_vector); distances, and so the gate, stay the index's own.
    `allowed` (a search's filters, resolved against the view) is applied inside each index's ranking."""

    def __init__(self, vector: VectorIndex | None, lexical: LexicalIndex, view: StoreView,
                 embed_query: Callable[[str], np.ndarray], rrf_k: int = 60, fusion_depth: int = 100,
                 lexical_weight: float = LEXICAL_WEIGHT,
                 rank_vector: Callable[[str, np.ndarray], np.ndarray] | None = None,
                 allowed: Allowed | None = None) -> None:
        self.vector, self.lexical = vector, lexical
        self.allowed = allowed
        self.view = view
        self._embed = embed_query
        self.rrf_k = rrf_k
        self.fusion_depth = fusion_depth
        self.lexical_weight = lexical_weight
        self._rank_vector = rank_vector or (lambda _query, v: v)

    def search(self, query: str, mode: str = "hybrid", k: int = 20) -> list[Hit]:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        vector, lexical = self.vector, self.lexical
        allowed = self.allowed
        # Nothing indexed yet (the collection checks emptiness before it searches), or nothing the filters allow.
        if vector is None or (allowed is not None and not len(allowed.documents)):
            return []
        q = self._embed(query)
        exact: list[int] = []
        if mode == "dense":
            ids, scores = _traced("citerag.dense", lambda: vector.search(q, k, allowed))
            similarity = scores
            found: dict[int, float] = {}
        elif mode == "adaptive":
            ranking = self._rank_vector(query, q)
            dense, _ = _traced("citerag.dense", lambda: vector.search(ranking, self.fusion_depth, allowed))
            lexical_ids, lexical_scores = _traced("citerag.bm25",
                                                  lambda: lexical.search(query, self.fusion_depth, allowed))
            shortlist = lexical_ids[:SHORTLIST].tolist()
            contents = {i: c.content for i, c in self.view.chunks(shortlist).items()}
            # The words of the lexical index's own tokenisation (an index without one: the reference's).
            exact = exact_matches(query, shortlist, contents, analyzer=getattr(lexical, "analyzer", REFERENCE))
            found = evidence(lexical_ids, lexical_scores, lexical.query_mass(query, allowed))
            ids, scores = _traced("citerag.fusion", lambda: fused_order(
                dense, found, lambda c: vector.similarity(ranking, c), self.lexical_weight, exact))
            ids, scores = ids[:k], scores[:k]
            similarity = vector.similarity(q, ids)
        else:
            if mode == "bm25":
                ids, scores = _traced("citerag.bm25", lambda: lexical.search(query, k, allowed))
                found = evidence(ids, scores, lexical.query_mass(query, allowed))
            else:
                dense, _ = _traced("citerag.dense", lambda: vector.search(q, self.fusion_depth, allowed))
                lexical_ids, lexical_scores = _traced("citerag.bm25",
                                                      lambda: lexical.search(query, self.fusion_depth, allowed))

                def fuse() -> tuple[np.ndarray, np.ndarray]:
                    fused = rrf([dense.tolist(), lexical_ids.tolist()], k=self.rrf_k)[:k]
                    return (np.array([i for i, _ in fused], dtype=np.int64),
                            np.array([s for _, s in fused], dtype=np.float64))

                ids, scores = _traced("citerag.fusion", fuse)
                found = evidence(lexical_ids, lexical_scores, lexical.query_mass(query, allowed))
            # Every hit, BM25-only ones included, gets its exact cosine distance, so the gate treats all alike.
            similarity = vector.similarity(q, ids)
        decisive = set(exact)
        return hits_from_rows(self.view, [(i, r + 1, s, 1.0 - c, i in decisive, found.get(i, 0.0))
                                          for r, (i, s, c) in enumerate(zip(ids.tolist(), scores.tolist(),
                                                                            similarity.tolist(), strict=True))])

    def texts(self, document_ids: Iterable[int]) -> dict[int, str]:
        """Canonical texts, from the same view as the hits."""
        return self.view.texts(document_ids)


def hits_from_rows(view: StoreView, rows: Sequence[Sequence[float]]) -> list[Hit]:
    """Hits from (chunk id, rank, score, cosine distance[, exact[, lexical evidence]]) rows, their chunks and
    documents read from `view` (a cached retrieval is stored as these rows; its key names the generation, so the
    ids are the view's)."""
    chunks = view.chunks(int(r[0]) for r in rows)
    documents = view.documents({c.document_id for c in chunks.values()})
    return [Hit(chunk=chunks[int(r[0])], document=documents[chunks[int(r[0])].document_id], rank=int(r[1]),
                score=float(r[2]), cosine_distance=float(r[3]), exact=bool(r[4]) if len(r) > 4 else False,
                lexical=float(r[5]) if len(r) > 5 else 0.0)
            for r in rows]


def _traced(name: str, stage: Callable[[], tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One ranking stage as a span of the query's trace, with the chunk ids and scores it returned."""
    with tracer.start_as_current_span(name) as span:
        ids, scores = stage()
        span.set_attributes({"citerag.hits.count": len(ids), "citerag.hits.chunk_ids": [int(i) for i in ids],
                             "citerag.hits.scores": [round(float(x), 6) for x in scores]})
        return ids, scores
