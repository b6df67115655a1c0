"""Several packaged encoders side by side in one vector: `minilm+use`, the default, and `minilm+e5+use`.

Each text's unit vectors are concatenated and scaled by 1/sqrt(n), so the result is a unit vector and the
cosine of two texts is the mean of the models' cosines: score fusion done by the vector index itself, with one
vector per chunk, one stamp, one distance scale and one calibrated refusal rule.

Why the default is MiniLM + USE multilingual (docs/multilingual.md has the paired tests): MiniLM is the best
single encoder for English and weak in German; USE and E5 serve German and cross-lingual questions. Fused
with USE, English questions rank as with MiniLM alone or better, and German ones gain what USE brings, for
about a third more embedding time. E5 added (`minilm+e5+use`) wins more German questions, for about ten times
the embedding time, so it is the option, not the default. Routing each question to one model by its language
was measured too; it gives up the English gain and would put two distance scales under one refusal cut.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from citerag.embed.base import Encoder, check_unit, encode_queries

SEPARATOR = "+"
# Short names a fused model's name is written with, and the packaged model each stands for.
PARTS = {"minilm": "all-MiniLM-L6-v2", "use": "use-multilingual-v3", "e5": "multilingual-e5-small"}
# Each packaged model's dimension (a test checks them against the loaded models): a query is weighted per block
# without loading anything.
DIMS = {"all-MiniLM-L6-v2": 384, "use-multilingual-v3": 512, "multilingual-e5-small": 384}
ENGLISH_ONLY = frozenset({"all-MiniLM-L6-v2"})
# The share of the English-only models in the ranking of a question not in English (English questions: an equal
# share each, the index's own cosine). Chosen leave-one-set-out on the eight dev sets (docs/quality.md): 0.1 to 0.3
# in the folds, 0.3 on all; MiniLM reads German poorly, yet dropping it (0.0) ranks worse on three sets of four.
FOREIGN_SHARE = 0.3


def part_names(name: str) -> list[str] | None:
    """The packaged models a fused name stands for ("minilm+use" -> [MiniLM, USE]); None for any other name."""
    short = name.split(SEPARATOR)
    if len(short) < 2 or len(set(short)) != len(short) or not all(s in PARTS for s in short):
        return None
    return [PARTS[s] for s in short]


def foreign_share(name: str) -> float | None:
    """FOREIGN_SHARE where `name` is a fused encoder with an English-only and a multilingual part, else None."""
    names = part_names(name)
    if names is None:
        return None
    english = [n in ENGLISH_ONLY for n in names]
    return FOREIGN_SHARE if any(english) and not all(english) else None


def ranking_vector(name: str, vector: np.ndarray, language: str, share: float = FOREIGN_SHARE) -> np.ndarray:
    """The query vector whose dot product with a chunk's fused vector is the models' cosines weighted for a question
    in `language`: unchanged for English or for an encoder that is not fused (or has no English-only part), else
    the English-only models' blocks scaled to `share` in all and the others' to the rest."""
    names = part_names(name)
    if names is None or language == "en" or foreign_share(name) is None:
        return vector
    english = [n in ENGLISH_ONLY for n in names]
    shares = [share / sum(english) if e else (1 - share) / (len(names) - sum(english))
              for e in english]
    # A block holds the model's unit vector / sqrt(n); its dot product with a chunk's counts 1/n of the cosine.
    scale = np.concatenate([np.full(DIMS[n], w * len(names), dtype=np.float32)
                            for n, w in zip(names, shares, strict=True)])
    return np.asarray(vector, dtype=np.float32) * scale


class FusedEncoder:
    """`parallel`: encode with every part at once, each in its own thread (numpy and ONNX Runtime release the GIL), so
    USE's single thread runs beside MiniLM's batches instead of after them; the vectors are the same."""

    def __init__(self, name: str, parts: Sequence[Encoder], parallel: bool = False) -> None:
        self.name = name
        self.parts = tuple(parts)
        self.parallel = parallel and len(self.parts) > 1
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self.dim = sum(p.dim for p in self.parts)
        # A chunk must fit every window: the smallest counts, and its word pieces are the ones reported.
        self._window = min(self.parts, key=lambda p: p.max_tokens)
        self.max_tokens = self._window.max_tokens
        self._scale = np.float32(1.0 / math.sqrt(len(self.parts)))

    def _join(self, blocks: list[np.ndarray]) -> np.ndarray:
        joined = np.hstack([np.asarray(b, dtype=np.float32) for b in blocks]) * self._scale
        return check_unit(joined, self.name)

    def _each(self, encode: Callable[[Encoder], np.ndarray], texts: list[str]) -> list[np.ndarray]:
        if not self.parallel or not texts:
            return [encode(p) for p in self.parts]
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(len(self.parts) - 1, thread_name_prefix="citerag-fused")
        # The first part (MiniLM, the slowest) in this thread, the others beside it.
        others = [self._pool.submit(encode, p) for p in self.parts[1:]]
        first = encode(self.parts[0])
        return [first, *(f.result() for f in others)]

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return self._join(self._each(lambda p: p.encode(texts, progress), texts))

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self._join(self._each(lambda p: encode_queries(p, texts), texts))

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self._window.count_tokens(texts)
