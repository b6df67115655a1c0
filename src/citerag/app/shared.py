"""What the collections of one process share, each loaded once whichever collection asks first: encoders,
rerankers, generators, caches (with their hit counts) and the citation counters."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from cachetools import LRUCache

from citerag.answer.check import CitationMetrics
from citerag.app.caching import GENERATOR_SETTINGS, cache_key
from citerag.cache import Cache, open_cache
from citerag.settings import Settings


class Shared:
    """Models and caches of one process."""

    def __init__(self) -> None:
        self.cache_counts: Counter[tuple[str, str]] = Counter()  # (level, "hit" | "miss")
        self.citation_metrics = CitationMetrics()
        self._models: dict[tuple[str, ...], Any] = {}
        self._lock = threading.RLock()
        # The cores an encoder of this process may keep busy (Settings.encoder_threads, 0 = all): a property of the
        # process, taken from the first collection it opens (Citerag.open_collection).
        self.encoder_threads: int | None = None
        # A question's filters resolved, by (store, collection, generation, filters): asked again before the
        # collection changes, a filter costs no read of its documents' rows.
        self._allowed: LRUCache[tuple[Any, ...], Any] = LRUCache(maxsize=256)
        self._allowed_lock = threading.Lock()  # cachetools' caches are not thread-safe

    def resolved(self, key: tuple[Any, ...], resolve: Callable[[], Any]) -> Any:
        """What `resolve` gives for `key` (filters resolved, see app/retrieval.py), computed once while kept."""
        with self._allowed_lock:
            found = self._allowed.get(key)
        if found is None:
            found = resolve()  # outside the lock: two threads may both compute it, alike
            with self._allowed_lock:
                self._allowed[key] = found
        return found

    def close_caches(self) -> None:
        for key in [k for k in self._models if k[0] == "cache"]:
            self._models.pop(key).close()

    def _model(self, key: tuple[str, ...], load: Callable[[], Any]) -> Any:
        with self._lock:
            if key not in self._models:
                self._models[key] = load()
            return self._models[key]

    def register_encoder(self, encoder: Any) -> None:
        """Use this encoder object for its `name` (a custom model, or a deterministic one in tests)."""
        with self._lock:
            self._models[("encoder", encoder.name)] = encoder

    def encoder(self, name: str) -> Any:
        from citerag.embed import load_encoder

        return self._model(("encoder", name), lambda: load_encoder(name, self.encoder_threads or 0))

    def reranker(self, name: str) -> Any:
        """The cross-encoder in folder `name`, or None when `name` is empty (reranking off)."""
        if not name:
            return None
        from citerag.search.rerank import load_reranker

        return self._model(("reranker", name), lambda: load_reranker(name))

    def generator(self, settings: Settings) -> Any:
        from citerag.answer.generators import make_generator

        key = ("generator", settings.model_dump_json(include=GENERATOR_SETTINGS))
        return self._model(key, lambda: make_generator(settings, lambda: self.encoder(settings.embedding_model)))

    def cache(self, url: str) -> Cache:
        """The cache backend at `url` ("memory" or redis://...), opened once per process."""
        cache: Cache = self._model(("cache", url), lambda: open_cache(url))
        return cache

    def cached(self, level: str, url: str, key: str, ttl: float) -> bytes | None:
        """The entry under `key`, counted as a hit or a miss of `level`; None when the level is off (ttl 0)."""
        if ttl <= 0:
            return None
        value = self.cache(url).get(key)
        self.cache_counts[(level, "miss" if value is None else "hit")] += 1
        return value

    def query_vector(self, model: str, text: str, cache_url: str = "memory", ttl: float = 86400.0,
                     hits: dict[str, bool] | None = None) -> np.ndarray:
        """The question's vector, from the query-embedding cache when it holds it (`hits["query"]` says)."""
        key = cache_key("query", {"model": model, "text": text})
        blob = self.cached("query", cache_url, key, ttl)
        if hits is not None:
            hits["query"] = blob is not None
        if blob is not None:
            return np.frombuffer(blob, dtype=np.float32)
        return self.embed_queries(model, [text], cache_url, ttl)[0]

    def embed_queries(self, model: str, texts: Sequence[str], cache_url: str = "memory",
                      ttl: float = 86400.0) -> np.ndarray:
        """Embed questions in one batch (an evaluation's queries, ahead of time) and cache them: later searches
        take them from the cache; the vectors are the ones a single query would get."""
        from citerag.embed import encode_queries

        keys = [cache_key("query", {"model": model, "text": text}) for text in texts]
        # Texts already cached are not embedded again: every refit of the refusal rule asks the same ~220
        # out-of-domain bank questions, and a growing collection is refitted many times while it is uploaded.
        found = [self.cache(cache_url).get(key) if ttl > 0 else None for key in keys]
        vectors = [None if blob is None else np.frombuffer(blob, dtype=np.float32) for blob in found]
        missing = [i for i, vector in enumerate(vectors) if vector is None]
        if missing:
            embedded = np.asarray(encode_queries(self.encoder(model), [texts[i] for i in missing]), dtype=np.float32)
            for i, vector in zip(missing, embedded, strict=True):
                vectors[i] = vector
                if ttl > 0:
                    self.cache(cache_url).set(keys[i], vector.tobytes(), ttl)
        filled = [vector for vector in vectors if vector is not None]  # all of them by now
        return np.stack(filled) if filled else np.zeros((0, 0), dtype=np.float32)
