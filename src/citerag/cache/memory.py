"""The in-process cache (the default): cachetools' TLRU, which bounds the entries and honours a TTL per entry."""

from __future__ import annotations

import threading
import time
from typing import Any

from cachetools import TLRUCache


def _expires(_key: str, value: tuple[bytes, float], now: float) -> float:
    return now + value[1]


class MemoryCache:
    name = "memory"

    def __init__(self, max_entries: int = 20_000) -> None:
        self._data: TLRUCache[str, tuple[bytes, float]] = TLRUCache(max_entries, ttu=_expires, timer=time.monotonic)
        self._lock = threading.Lock()  # cachetools' caches are not thread-safe

    def get(self, key: str) -> bytes | None:
        with self._lock:
            entry: Any = self._data.get(key)
        return None if entry is None else entry[0]

    def set(self, key: str, value: bytes, ttl: float) -> None:
        with self._lock:
            self._data[key] = (value, ttl)

    def close(self) -> None:
        with self._lock:
            self._data.clear()
