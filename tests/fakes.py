"""A small deterministic encoder for fast unit tests: no model, no torch, same vectors on every machine.

Each word is hashed into one of `dim` buckets (signed), so texts sharing words get close vectors and the
search, the gate and the citations behave as they do with a real encoder. Tests that measure retrieval
quality use the real all-MiniLM-L6-v2 instead (the `encoder` fixture).
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


class HashEncoder:
    def __init__(self, name: str = "hash-64", dim: int = 64) -> None:
        self.name = name
        self.dim = dim
        self.max_tokens = 256

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float64)
        for word in _WORD.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        if not v.any():
            v[0] = 1.0
        return v / np.linalg.norm(v)

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        return np.array([self._vector(t) for t in texts], dtype=np.float32).reshape(len(texts), self.dim)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(_WORD.findall(t.lower())) + 2 for t in texts]
