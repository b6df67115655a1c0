"""The encoder contract: texts in, unit-length float32 rows out."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from citerag.errors import CiteragError


class Encoder(Protocol):
    name: str
    dim: int
    max_tokens: int

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Unit-length float32 vectors, one row per text."""
        ...

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Word pieces per text, special tokens included: what the window limit applies to."""
        ...


def check_unit(vectors: np.ndarray, name: str, tol: float = 1e-3) -> np.ndarray:
    """Cosine distance equals ||a-b||^2 / 2 only for unit vectors; refuse anything else."""
    if vectors.size:
        norms = np.linalg.norm(vectors, axis=1)
        worst = float(np.max(np.abs(norms - 1.0)))
        if worst > tol or not np.all(np.isfinite(vectors)):
            raise CiteragError(f"embedding model {name} returned vectors that are not unit length "
                               f"(norm off by {worst:.3g})")
    return vectors.astype(np.float32, copy=False)


def encode_queries(encoder: Encoder, texts: list[str]) -> np.ndarray:
    """Questions as vectors: models trained with a query/passage asymmetry (E5) have `encode_queries`,
    every other encoder embeds a question like a passage."""
    encode = getattr(encoder, "encode_queries", None) or encoder.encode
    return np.asarray(encode(texts))
