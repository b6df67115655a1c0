"""The rerank stage: a cross-encoder reads the question and each shortlisted passage together.

A bi-encoder embeds question and passage apart; a cross-encoder scores the pair, which is slower but
sharper at the head of the list. It only reorders the first `shortlist` hits (default 25) of the
retriever's list and returns those, ranks renumbered 1..n, `score` set to the cross-encoder's score
and `cosine_distance` unchanged, so the gate still applies the same distance threshold to each hit.

Models load from local folders only (`citerag train-reranker` writes one; a downloaded
cross-encoder/ms-marco-MiniLM-L-6-v2 folder works too), or from a model id already in the local
Hugging Face cache. Nothing is fetched from a hub at run time.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import numpy as np

from citerag.errors import CiteragError
from citerag.types import Hit

DEFAULT_SHORTLIST = 25
DEFAULT_MAX_LENGTH = 256
META_NAME = "citerag_reranker.json"  # written by `citerag train-reranker` beside the model


class Reranker(Protocol):
    name: str

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        """One relevance score per passage, higher is better; float64, same order as `passages`."""
        ...


def passage_text(hit: Hit) -> str:
    """What the reranker reads: the embedded text (contextual header + content), as the encoder saw it."""
    return hit.chunk.text


def rerank(query: str, hits: list[Hit], reranker: Reranker, shortlist: int = DEFAULT_SHORTLIST) -> list[Hit]:
    """The first `shortlist` hits, reordered by the reranker's score (ties keep retrieval order).

    Hits past the shortlist are dropped: their retrieval scores are on another scale, and the gate keeps
    at most a handful anyway. Ask the retriever for at least `shortlist` hits.
    """
    if shortlist < 1:
        raise ValueError("shortlist must be at least 1")
    head = hits[:shortlist]
    if not head:
        return []
    scores = np.asarray(reranker.score(query, [passage_text(h) for h in head]), dtype=np.float64)
    if scores.shape != (len(head),):
        raise CiteragError(f"reranker {reranker.name} returned {scores.shape} scores for {len(head)} passages")
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    return [replace(head[i], rank=r + 1, score=float(scores[i])) for r, i in enumerate(order)]


def resolve_model(name: str) -> str:
    """A local folder, or a model id that must already be in the local Hugging Face cache."""
    folder = Path(name).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise CiteragError(f"reranker folder {folder} has no config.json: not a cross-encoder model folder")
        return str(folder.resolve())
    if folder.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise CiteragError(f"reranker model {name!r} is not a model folder")
    return name  # a hub id: loaded with local_files_only, so only from the local cache


def trained_max_length(source: str) -> int | None:
    """The max_length a `citerag train-reranker` folder was trained at (from its metadata), else None."""
    meta = Path(source) / META_NAME
    try:
        value = json.loads(meta.read_text(encoding="utf-8"))["settings"]["max_length"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


class CrossEncoderReranker:
    """A sentence-transformers CrossEncoder on the CPU, loaded offline.

    `max_length` None: the length the folder was trained at when it says (a model trained on 128-token pairs
    and read at 256 sees text it never learned from: the second half of every passage), else 256."""

    def __init__(self, name: str, max_length: int | None = None, batch_size: int = 32) -> None:
        source = resolve_model(name)
        if max_length is None:
            max_length = trained_max_length(source) or DEFAULT_MAX_LENGTH
        self.max_length = max_length
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import CrossEncoder

        try:
            self._model = CrossEncoder(source, device="cpu", local_files_only=True, max_length=max_length)
        except OSError as exc:  # a hub id that is not in the local cache, or a broken folder
            raise CiteragError(f"cannot load reranker {name!r} offline: {str(exc).splitlines()[0]}") from exc
        self.name = name
        self.batch_size = batch_size

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0, dtype=np.float64)
        scores = self._model.predict([(query, p) for p in passages], batch_size=self.batch_size,
                                     show_progress_bar=False, convert_to_numpy=True)
        return np.asarray(scores, dtype=np.float64).reshape(len(passages))


@lru_cache(maxsize=2)
def load_reranker(name: str) -> Reranker:
    return CrossEncoderReranker(name)


class TimedReranker:
    """Wraps a reranker and records seconds per call: what reranking costs per query."""

    def __init__(self, inner: Reranker) -> None:
        self.inner = inner
        self.name = inner.name
        self.seconds: list[float] = []

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.inner.score(query, passages)
        finally:
            self.seconds.append(time.perf_counter() - t0)
