"""Sentence-level max-sim rescoring with the bi-encoder: a second stage that needs no training.

A chunk's vector is one mean-pooled summary of up to the encoder's window (MiniLM: 256 word pieces, so the
end of a long chunk is never seen); the sentence that answers a question can be drowned by the rest. Here
each shortlisted chunk is split into sentences, each sentence embedded by the same encoder (behind the
chunk's contextual header when `with_header`, so "it" still has its topic), and the chunk is rescored as

    score = (1 - weight) * cosine(query, chunk) + weight * max over sentences cosine(query, sentence)

Only the order changes: `cosine_distance` stays the chunk's own, so the gate is applied exactly as before.
Sentence vectors are cached by the text they embed (a chunk seen once costs nothing the next time).
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from citerag.embed.base import Encoder
from citerag.types import Hit, StoredChunk

# A sentence ends at . ! or ? followed by white space; a line break always ends one (lists, code, tables).
_SPLIT = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class MaxSimSettings:
    weight: float = 0.5  # share of the best sentence's cosine in the score; 1.0 is max-sim alone
    with_header: bool = True  # embed "header + sentence" rather than the bare sentence
    min_words: int = 4  # a shorter piece is joined to its neighbour: a fragment alone matches anything


def sentences(content: str, min_words: int = 4) -> list[str]:
    """The content's sentences and lines, fragments under `min_words` words joined to the one before (or
    after, for a leading fragment); at least one piece for any non-blank content."""
    pieces = [p.strip() for line in content.splitlines() for p in _SPLIT.split(line) if p.strip()]
    out: list[str] = []
    pending = ""  # leading fragments, waiting for a sentence to join
    for p in pieces:
        if len(p.split()) >= min_words:
            out.append(f"{pending} {p}".strip())
            pending = ""
        elif out:
            out[-1] = f"{out[-1]} {p}"
        else:
            pending = f"{pending} {p}".strip()
    if pending:
        out.append(pending)
    return out


def header_of(chunk: StoredChunk) -> str:
    """The contextual header the chunk's text starts with (strategies E, F), or ""."""
    at = chunk.text.find(chunk.content) if chunk.content else -1
    return chunk.text[:at].strip() if at > 0 else ""


def sentence_texts(chunk: StoredChunk, settings: MaxSimSettings) -> list[str]:
    parts = sentences(chunk.content, settings.min_words) or [chunk.text]
    header = header_of(chunk) if settings.with_header else ""
    return [f"{header}\n{s}" if header else s for s in parts]


class SentenceVectors:
    """Sentence vectors per chunk, computed by `encoder` on first use and kept (least recently used out)."""

    def __init__(self, encoder: Encoder, settings: MaxSimSettings, max_chunks: int = 100_000) -> None:
        self.encoder = encoder
        self.settings = settings
        self.max_chunks = max_chunks
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    @staticmethod
    def _key(chunk: StoredChunk) -> str:
        return hashlib.sha1(f"{chunk.text}\0{chunk.content}".encode()).hexdigest()

    def get(self, chunks: Sequence[StoredChunk]) -> list[np.ndarray]:
        """One (sentences x dim) matrix per chunk; the chunks not yet cached are embedded in one batch."""
        keys = [self._key(c) for c in chunks]
        missing: dict[str, list[str]] = {}
        for key, chunk in zip(keys, chunks, strict=True):
            if key not in self._cache and key not in missing:
                missing[key] = sentence_texts(chunk, self.settings)
        if missing:
            flat = [t for texts in missing.values() for t in texts]
            vectors = np.asarray(self.encoder.encode(flat), dtype=np.float32)
            at = 0
            for key, texts in missing.items():
                self._cache[key] = vectors[at:at + len(texts)]
                at += len(texts)
        out = []
        for key in keys:
            self._cache.move_to_end(key)
            out.append(self._cache[key])
        while len(self._cache) > self.max_chunks:
            self._cache.popitem(last=False)
        return out


def maxsim_rescore(query_vector: np.ndarray, hits: list[Hit], vectors: SentenceVectors) -> list[Hit]:
    """`hits` reordered by the mix of chunk and best-sentence cosine (ties keep retrieval order), ranks
    renumbered, `score` set to the mix."""
    if not hits:
        return []
    w = vectors.settings.weight
    q = np.asarray(query_vector, dtype=np.float32).reshape(-1)
    best = np.array([float(np.max(m @ q)) for m in vectors.get([h.chunk for h in hits])])
    chunk = np.array([1.0 - h.cosine_distance for h in hits])
    scores = (1.0 - w) * chunk + w * best
    order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))
    return [replace(hits[i], rank=r + 1, score=float(scores[i])) for r, i in enumerate(order)]
