"""An ensemble of the packaged encoders: one dense ranking per encoder over the same chunks, fused by rank.

Each encoder embeds every chunk's text once (its own passage form: E5 adds "passage: ") and the question
in its own query form; the rankings are fused with reciprocal rank fusion, so no score needs calibrating
across models whose cosines live on different scales.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from citerag.embed.base import Encoder, encode_queries
from citerag.search.fuse import rrf


@dataclass
class DenseMatrix:
    """One encoder's unit vectors for a set of chunks, row i for chunk `ids[i]`."""

    encoder: Encoder
    ids: np.ndarray  # int64 chunk ids
    vectors: np.ndarray  # float32, (len(ids), encoder.dim)

    def rank(self, query_vector: np.ndarray, depth: int) -> list[int]:
        """Chunk ids, most similar first (ties by row order)."""
        sims = self.vectors @ np.asarray(query_vector, dtype=np.float32).reshape(-1)
        order = np.argsort(-sims, kind="stable")[:depth]
        return [int(i) for i in self.ids[order]]


def embed_chunks(encoder: Encoder, ids: Sequence[int], texts: Sequence[str]) -> DenseMatrix:
    return DenseMatrix(encoder, np.asarray(ids, dtype=np.int64), np.asarray(encoder.encode(list(texts)),
                                                                             dtype=np.float32))


def ensemble_rank(query: str, matrices: Sequence[DenseMatrix], depth: int = 100, rrf_k: int = 60,
                  extra: Sequence[Sequence[int]] = ()) -> list[int]:
    """Chunk ids by RRF over every matrix's dense ranking of `query` (each to `depth`) and any `extra`
    rankings already made (e.g. the index's own dense ranking, so its model need not be held twice)."""
    lists = [list(r) for r in extra]
    for m in matrices:
        lists.append(m.rank(encode_queries(m.encoder, [query])[0], depth))
    return [i for i, _ in rrf(lists, k=rrf_k)]
