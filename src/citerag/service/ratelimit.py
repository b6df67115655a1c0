"""Requests per API key per window, with the `limits` library: a moving window in this process's memory, or in
Redis (`--rate-limit-storage redis://...`) so that every API process behind one balancer counts against the same
budget. A request over the budget is a 429 with Retry-After; one that presents no valid key is counted against
its client address, so guessing keys is throttled too, on the session routes as everywhere (citerag.service.auth
`limit`). The address is the connection's peer: a proxy's X-Forwarded-For counts only from the proxies
`--forwarded-allow-ips` names (citerag.service.server.run), or a forged header would buy a fresh budget."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from limits import RateLimitItem, parse
from limits.storage import Storage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from citerag.errors import CiteragError

OFF = ("none", "off", "0")
log = logging.getLogger("citerag.service")


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    retry_after_s: int  # whole seconds until the window admits one more request (0 when allowed)


class RateLimiter:
    def __init__(self, rate: str, storage_url: str = "memory://") -> None:
        self.rate = rate
        self._item: RateLimitItem = parse_rate(rate)
        try:
            storage = storage_from_string(storage_url)
        except Exception as exc:  # noqa: BLE001 - the library raises several kinds for a bad URL
            raise CiteragError(f"--rate-limit-storage {storage_url!r}: {exc}") from None
        if not isinstance(storage, Storage):  # async+redis:// and the like: the routes are synchronous
            raise CiteragError(f"--rate-limit-storage {storage_url!r}: expected memory:// or redis://HOST:PORT/DB")
        if not storage.check():
            raise CiteragError(f"--rate-limit-storage {storage_url!r}: cannot reach it")
        self._limiter = MovingWindowRateLimiter(storage)

    def hit(self, who: str) -> Verdict:
        try:
            if self._limiter.hit(self._item, who):
                return Verdict(True, 0)
            reset = self._limiter.get_window_stats(self._item, who).reset_time
        except Exception:  # noqa: BLE001 - a Redis outage must not take the API down with it: fail open, say so
            log.warning("rate limit storage unavailable: request from %s let through uncounted", who, exc_info=True)
            return Verdict(True, 0)
        return Verdict(False, max(1, math.ceil(reset - time.time())))


def parse_rate(rate: str) -> RateLimitItem:
    """"600/minute", "10 per second", "1000/hour": one limit, checked when the server starts."""
    try:
        item = parse(rate)
    except ValueError:
        item = None
    if item is None or item.amount < 1:
        raise CiteragError(f"--rate-limit {rate!r}: expected N/second, N/minute, N/hour or N/day "
                           f"(or none to turn it off)")
    return item


def make_limiter(rate: str | None, storage_url: str) -> RateLimiter | None:
    if rate is None or rate.strip().lower() in OFF:
        return None
    return RateLimiter(rate.strip(), storage_url)
