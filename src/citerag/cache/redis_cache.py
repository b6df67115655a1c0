"""A cache shared by every process of a deployment: Redis (redis-py), entries expiring by themselves (SET EX)."""

from __future__ import annotations

import logging

from citerag.errors import CiteragError

log = logging.getLogger("citerag")


class RedisCache:
    name = "redis"

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        import redis

        self._client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self._errors = (redis.RedisError, OSError)
        try:
            self._client.ping()
        except self._errors as exc:
            raise CiteragError(f"cache_url: cannot reach Redis at {_safe(url)}: {exc}") from None

    # A cache that fails is a miss, never an error: the answer is computed as if it were empty.
    def get(self, key: str) -> bytes | None:
        try:
            value = self._client.get(key)
        except self._errors as exc:
            log.warning("cache read failed (%s): computing instead", exc)
            return None
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes, ttl: float) -> None:
        try:
            self._client.set(key, value, px=max(1, int(ttl * 1000)))
        except self._errors as exc:
            log.warning("cache write failed (%s)", exc)

    def close(self) -> None:
        self._client.close()


def _safe(url: str) -> str:
    head, sep, tail = url.rpartition("@")
    return f"redis://***@{tail}" if sep else url
