"""The refusal rule's signals for calibration questions, from a collection's own indexes."""

from __future__ import annotations

from collections.abc import Sequence

from citerag.app.retrieval import Host, open_retriever


def best_signals(host: Host, queries: Sequence[str]) -> list[tuple[float, float]]:
    """Each question's smallest cosine distance to a chunk (dense search) and the largest share of its lexical
    evidence one chunk holds (BM25's best / the question's idf mass), without traces or caches of results:
    calibration questions are no user's questions."""
    s = host.settings
    vectors = host.app.embed_queries(s.embedding_model, queries, s.cache_url, s.cache_query_ttl)
    out = []
    with open_retriever(host) as retriever:
        assert retriever.vector is not None  # open_retriever refuses an empty collection
        for query, vector in zip(queries, vectors, strict=True):
            _, similarity = retriever.vector.search(vector, 1)
            _, scores = retriever.lexical.search(query, 1)
            mass = retriever.lexical.query_mass(query)
            out.append((1.0 - float(similarity[0]) if len(similarity) else 2.0,
                        float(scores[0]) / mass if len(scores) and mass > 0 else 0.0))
    return out
