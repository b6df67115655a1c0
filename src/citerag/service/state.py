"""What every request of one server shares: the application core, the API keys, the ingestion queue, the limits."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from citerag.app.home import Citerag
from citerag.errors import CiteragError
from citerag.jobs import IngestQueue
from citerag.keystore.base import KeyStore
from citerag.service.ratelimit import OFF, RateLimiter, parse_rate


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    keys_required: bool = True
    max_upload_mb: float = 100.0  # one request's body
    max_files: int = 100  # files in one upload request
    # GET /metrics then needs `Authorization: Bearer TOKEN`; None: open. Never printed (repr=False).
    metrics_token: str | None = field(default=None, repr=False)
    # Requests per key (or per client address for requests without a valid key) per window, "600/minute";
    # None: no limit. `citerag serve` turns it on by default; an application embedding create_app chooses.
    rate_limit: str | None = None
    rate_limit_storage: str = "memory://"  # or redis://HOST:PORT/DB, shared by every API process
    # A request head must arrive whole within this, and a body may not pause longer (citerag.service.server).
    client_timeout_s: float = 30.0

    def check(self) -> None:
        if self.rate_limit is not None and self.rate_limit.strip().lower() not in OFF:
            parse_rate(self.rate_limit)  # a wrong rate is refused before anything loads
        if not self.keys_required and not is_loopback(self.host):
            raise CiteragError(f"--no-keys serves every collection to anyone who can reach {self.host}: "
                               "it is allowed only on a loopback address (127.0.0.1, ::1)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Service:
    app: Citerag
    keys: KeyStore
    jobs: IngestQueue
    config: ServiceConfig
    limiter: RateLimiter | None = None
