"""What every request of one server shares: the application core, the API keys, the ingestion queue, the limits."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from citerag.app import Citerag
from citerag.errors import CiteragError
from citerag.service.jobs import IngestQueue
from citerag.service.keys import KeyStore


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    keys_required: bool = True
    max_upload_mb: float = 100.0  # one request's body
    max_files: int = 100  # files in one upload request
    # GET /metrics then needs `Authorization: Bearer TOKEN`; None: open. Never printed (repr=False).
    metrics_token: str | None = field(default=None, repr=False)

    def check(self) -> None:
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
