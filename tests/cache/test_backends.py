"""The cache contract, run by every backend: memory (cachetools) and a real Redis on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from citerag.cache import Cache, open_cache
from citerag.errors import CiteragError


@pytest.fixture(params=["memory", "redis"])
def cache(request: pytest.FixtureRequest) -> Iterator[Cache]:
    url = "memory" if request.param == "memory" else request.getfixturevalue("redis_url")
    backend = open_cache(url)
    yield backend
    backend.close()


def test_a_value_comes_back_byte_for_byte(cache: Cache) -> None:
    vector = np.random.default_rng(7).standard_normal(384).astype(np.float32)
    cache.set("citerag:test:vector", vector.tobytes(), 60)
    assert np.array_equal(np.frombuffer(cache.get("citerag:test:vector") or b"", dtype=np.float32), vector)
    cache.set("citerag:test:vector", b"\x00replaced", 60)
    assert cache.get("citerag:test:vector") == b"\x00replaced"
    assert cache.get("citerag:test:absent") is None


def test_an_entry_expires_after_its_ttl(cache: Cache) -> None:
    cache.set("citerag:test:short", b"soon gone", 0.3)
    cache.set("citerag:test:long", b"stays", 60)
    assert cache.get("citerag:test:short") == b"soon gone"
    time.sleep(0.6)
    assert cache.get("citerag:test:short") is None and cache.get("citerag:test:long") == b"stays"


def test_a_bad_url_is_one_line_naming_the_setting() -> None:
    with pytest.raises(CiteragError, match="cache_url"):
        open_cache("memcached://x")
    with pytest.raises(CiteragError, match="cannot reach Redis"):
        open_cache("redis://127.0.0.1:1/0")


def test_redis_that_goes_away_is_a_miss_not_an_error(redis_url: str) -> None:
    import redis

    backend = open_cache(redis_url)
    backend.set("citerag:test:k", b"v", 60)
    backend._client = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)  # type: ignore[attr-defined]
    assert backend.get("citerag:test:k") is None
    backend.set("citerag:test:k", b"w", 60)  # logged, not raised
