"""What every request of one server shares: the application core, the API keys, the ingestion queue, the limits."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from citerag.app.home import Citerag
from citerag.app.syncer import Syncer
from citerag.audit.base import AuditLog, NoAudit
from citerag.errors import CiteragError
from citerag.jobs import IngestQueue
from citerag.keystore.base import KeyStore
from citerag.service.oidc import OidcClient, OidcConfig, PendingLogins
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
    # A browser session (the page's sign-in cookie) ends this long after it began, at the latest: a working day,
    # so a cookie left in a shared browser does not open the collection for days.
    session_ttl_s: float = 12 * 3600.0
    # Proxies whose X-Forwarded-For / X-Forwarded-Proto are believed ("10.0.0.5,10.0.0.6", CIDR ranges, or "*"),
    # passed to uvicorn by citerag.service.server.run. None: none is, whatever uvicorn's FORWARDED_ALLOW_IPS says,
    # since a header anyone can send would otherwise pick the address the rate limit counts against.
    forwarded_allow_ips: str | None = None
    # OpenID Connect sign-in (citerag.service.oidc): the page's "Sign in" and bearer ID tokens. A signed-in user
    # reads every collection, the documents open to everyone and those of its groups (the provider's claim); the
    # members of `oidc_admin_group` administer every collection. None: keys only.
    oidc: OidcConfig | None = field(default=None, repr=False)
    oidc_admin_group: str | None = None

    def check(self) -> None:
        if self.rate_limit is not None and self.rate_limit.strip().lower() not in OFF:
            parse_rate(self.rate_limit)  # a wrong rate is refused before anything loads
        if self.forwarded_allow_ips is not None:
            check_proxies(self.forwarded_allow_ips)
        if not self.keys_required and not is_loopback(self.host):
            raise CiteragError(f"--no-keys serves every collection to anyone who can reach {self.host}: "
                               "it is allowed only on a loopback address (127.0.0.1, ::1)")


def check_proxies(value: str) -> None:
    """`--forwarded-allow-ips`: "*" or comma-separated addresses and networks. uvicorn would take a typo for a
    literal that never matches, and the proxy's clients would then silently share its one address's budget."""
    items = [item.strip() for item in value.split(",")]
    for item in items:
        try:
            if item != "*":
                ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise CiteragError(f"--forwarded-allow-ips {value!r}: {item!r} is not an address or network "
                               "(expected e.g. 10.0.0.5,10.1.0.0/16 or *)") from None


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
    syncer: Syncer | None = None  # the sources' scheduler (citerag.app.syncer)
    # The home's audit trail (citerag.audit): the routes record with svc.audit.record(event(...)), which never raises.
    audit: AuditLog = field(default_factory=NoAudit)
    oidc: OidcClient | None = None  # the provider's client, when config.oidc is set
    logins: PendingLogins = field(default_factory=PendingLogins)  # sign-ins sent to the provider, by state
