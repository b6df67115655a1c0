"""Caches for the three levels of a question (query embedding, retrieval result, answer): one backend per file
behind the Cache protocol, chosen by URL."""

from __future__ import annotations

from citerag.cache.base import Cache

LEVELS = ("query", "retrieval", "answer")


def open_cache(url: str) -> Cache:
    """"" or "memory" -> this process's memory; "redis://..." -> a shared Redis."""
    if url in ("", "memory"):
        from citerag.cache.memory import MemoryCache

        return MemoryCache()
    if url.startswith(("redis://", "rediss://", "unix://")):
        from citerag.cache.redis_cache import RedisCache

        return RedisCache(url)
    from citerag.errors import CiteragError

    raise CiteragError(f"cache_url {url!r}: expected memory or redis://HOST:PORT/DB")


__all__ = ["LEVELS", "Cache", "open_cache"]
