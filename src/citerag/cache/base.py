"""The cache protocol: bytes under string keys, each with a time to live.

Keys are built by the application (citerag.app) from everything that changes the value: the collection, the
model, the settings that matter and the collection's store generation, which every upload, replacement, delete
and reindex bumps. A changed collection therefore never finds an entry written before the change: staleness is
excluded by construction, not by invalidation.
"""

from __future__ import annotations

from typing import Protocol


class Cache(Protocol):
    name: str  # "memory" | "redis", for traces and metrics

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl: float) -> None: ...

    def close(self) -> None: ...
