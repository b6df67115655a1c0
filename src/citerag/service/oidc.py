"""Sign-in through an OpenID Connect provider: the authorization code flow with PKCE (S256) as a confidential or
public client (Authlib), ID tokens checked against the provider's JWKS (PyJWT), and the identity they carry.

The server keeps each login's `Pending` (state, nonce, PKCE verifier) on its side, in `PendingLogins`, from
`OidcClient.start` to the callback's `OidcClient.finish`. API clients may present an ID token of the same provider
and client as a bearer token (`OidcClient.verify_bearer`). Every failure is one `OidcError` with a one-line message.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.httpx_client import OAuth2Client

from citerag.errors import CiteragError, first_line
from citerag.keystore.base import MAX_GROUPS
from citerag.types import GROUP

log = logging.getLogger("citerag.service")

LEEWAY_S = 30  # clock skew allowed between the provider and this server, on exp/iat/nbf
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# What an ID token may be signed with: the provider's asymmetric algorithms only (never HS* or none).
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


class OidcError(CiteragError):
    """A sign-in or a bearer token refused, or the provider unreachable: one line, safe to show a user."""


@dataclass(frozen=True)
class OidcConfig:
    issuer: str  # exactly as the provider's discovery document names it
    client_id: str
    client_secret: str | None  # None: a public client (PKCE alone, no client authentication)
    groups_claim: str = "groups"
    scopes: str = "openid profile email groups"


@dataclass(frozen=True)
class Identity:
    subject: str  # the provider's `sub`
    name: str  # preferred_username, else name, else email, else sub
    groups: tuple[str, ...]


def usable_groups(identity: Identity) -> list[str]:
    """The claim's groups that are group names here (citerag.types.GROUP); others (spaces, over 128 characters) are
    left out, and past MAX_GROUPS the rest, with a warning, rather than refusing the sign-in."""
    usable = list(dict.fromkeys(g for g in identity.groups if GROUP.fullmatch(g)))
    if len(usable) > MAX_GROUPS or len(usable) < len(set(identity.groups)):
        log.warning("%s's claim has groups that are not group names here, or more than %d: only the first %d usable "
                    "ones are kept", identity.name, MAX_GROUPS, MAX_GROUPS)
    return usable[:MAX_GROUPS]


@dataclass(frozen=True)
class Pending:
    """A login under way, kept server-side until its callback; never sent to the browser except `state`."""

    state: str
    nonce: str
    code_verifier: str
    redirect_uri: str
    created_at: float  # time.time()


def _clean(text: object, limit: int = 200) -> str:
    """Text from the provider or a library, as one short line."""
    return " ".join(str(text).split())[:limit]


def identity_from_claims(claims: Mapping[str, Any], groups_claim: str = "groups") -> Identity:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise OidcError("the ID token has no subject")
    name = next((v for k in ("preferred_username", "name", "email")
                 if isinstance(v := claims.get(k), str) and v.strip()), subject)
    raw = claims.get(groups_claim)
    if isinstance(raw, str):
        groups: tuple[str, ...] = (raw,)
    elif isinstance(raw, list) and all(isinstance(g, str) for g in raw):
        groups = tuple(raw)
    else:
        groups = ()
    return Identity(subject=subject, name=name.strip(), groups=groups)


class OidcClient:
    """One provider and client: thread-safe, the discovery document and the JWKS fetched once and cached."""

    def __init__(self, config: OidcConfig, timeout: float = 10.0) -> None:
        parts = urlsplit(config.issuer)
        if not (parts.scheme == "https" or (parts.scheme == "http" and parts.hostname in LOOPBACK)):
            raise OidcError(f"the OIDC issuer must be an https:// URL (http:// on loopback only): {config.issuer}")
        self.config = config
        self.timeout = timeout
        self._lock = threading.Lock()
        self._metadata: dict[str, Any] | None = None
        self._jwks: jwt.PyJWKClient | None = None

    def metadata(self) -> dict[str, Any]:
        """The provider's discovery document, fetched once and checked to name this issuer."""
        with self._lock:
            if self._metadata is None:
                url = self.config.issuer.rstrip("/") + "/.well-known/openid-configuration"
                try:
                    response = httpx.get(url, timeout=self.timeout, follow_redirects=False)
                    response.raise_for_status()
                    found = response.json()
                except (httpx.HTTPError, ValueError) as exc:
                    reason = _clean(first_line(exc))
                    raise OidcError(f"the OIDC provider's discovery at {url} failed: {reason}") from exc
                if not isinstance(found, dict) or found.get("issuer") != self.config.issuer:
                    raise OidcError(f"the discovery document at {url} is not for the issuer {self.config.issuer}")
                if not all(isinstance(found.get(k), str) for k in ("authorization_endpoint", "token_endpoint",
                                                                     "jwks_uri")):
                    raise OidcError(f"the discovery document at {url} lacks an endpoint")
                self._metadata = found
                self._jwks = jwt.PyJWKClient(found["jwks_uri"], cache_keys=True, timeout=self.timeout)
            return self._metadata

    def _client(self, redirect_uri: str) -> OAuth2Client:
        secret = self.config.client_secret
        return OAuth2Client(self.config.client_id, secret, scope=self.config.scopes, redirect_uri=redirect_uri,
                            code_challenge_method="S256", timeout=self.timeout,
                            token_endpoint_auth_method="client_secret_basic" if secret else "none")

    def start(self, redirect_uri: str) -> tuple[str, Pending]:
        """The URL to send the browser to, and what to keep server-side (keyed by its state) for the callback."""
        endpoint = self.metadata()["authorization_endpoint"]
        pending = Pending(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32),
                          code_verifier=secrets.token_urlsafe(64), redirect_uri=redirect_uri, created_at=time.time())
        with self._client(redirect_uri) as client:
            url, _ = client.create_authorization_url(endpoint, state=pending.state,
                                                     code_verifier=pending.code_verifier, nonce=pending.nonce)
        return url, pending

    def finish(self, pending: Pending, params: Mapping[str, str]) -> Identity:
        """The callback's query parameters -> the signed-in identity: state checked, the code exchanged with the
        PKCE verifier, the ID token validated (signature, iss, aud, exp, nonce)."""
        if not hmac.compare_digest(params.get("state", ""), pending.state):
            raise OidcError("the sign-in's state does not match: start the sign-in again")
        if "error" in params:
            description = params.get("error_description", "")
            raise OidcError(f"the identity provider refused the sign-in: {_clean(params['error'], 60)}"
                            + (f" ({_clean(description)})" if description else ""))
        metadata = self.metadata()
        if "iss" in params and params["iss"] != self.config.issuer:  # RFC 9207: a response from another provider
            raise OidcError("the sign-in's response comes from another issuer")
        code = params.get("code", "")
        if not code:
            raise OidcError("the sign-in's response has no authorization code")
        try:
            with self._client(pending.redirect_uri) as client:
                token = client.fetch_token(metadata["token_endpoint"], grant_type="authorization_code", code=code,
                                           code_verifier=pending.code_verifier)
        except (httpx.HTTPError, AuthlibBaseError, ValueError) as exc:
            raise OidcError(f"the identity provider refused the authorization code: {_clean(first_line(exc))}") from exc
        id_token = token.get("id_token")
        if not isinstance(id_token, str):
            raise OidcError("the identity provider returned no ID token")
        claims = self._decode(id_token)
        if not isinstance(claims.get("nonce"), str) or not hmac.compare_digest(claims["nonce"], pending.nonce):
            raise OidcError("the ID token's nonce does not match this sign-in")
        return identity_from_claims(claims, self.config.groups_claim)

    def verify_bearer(self, token: str) -> Identity:
        """An ID token of this provider for this client, presented by an API client: signature, iss, aud, exp."""
        return identity_from_claims(self._decode(token), self.config.groups_claim)

    def _decode(self, token: str) -> dict[str, Any]:
        metadata = self.metadata()
        assert self._jwks is not None
        offered = metadata.get("id_token_signing_alg_values_supported") or ["RS256"]
        algorithms = [a for a in offered if a in SIGNING_ALGORITHMS]
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=algorithms, audience=self.config.client_id, issuer=self.config.issuer,
                leeway=LEEWAY_S, options={"require": ["iss", "aud", "exp", "iat", "sub"]})
        except (jwt.PyJWTError, ValueError) as exc:
            raise OidcError(f"the ID token is not valid: {_clean(first_line(exc))}") from exc
        audience = claims["aud"]
        if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != self.config.client_id:
            raise OidcError("the ID token is not valid: issued to another party (azp)")
        return claims


class PendingLogins:
    """Logins under way, by state: in memory, thread-safe, each kept `ttl_s` at most, `max_size` at most (the
    oldest dropped first). `pop` hands a login back once."""

    def __init__(self, ttl_s: float = 600.0, max_size: int = 10_000, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s, self.max_size, self.clock = ttl_s, max_size, clock
        self._lock = threading.Lock()
        self._items: dict[str, Pending] = {}  # insertion order = age

    def add(self, pending: Pending) -> None:
        with self._lock:
            self._expire()
            while len(self._items) >= self.max_size:
                del self._items[next(iter(self._items))]
            self._items[pending.state] = pending

    def pop(self, state: str) -> Pending | None:
        """The login with this state, removed; None if unknown, already used or expired."""
        with self._lock:
            pending = self._items.pop(state, None)
        if pending is None or self.clock() - pending.created_at > self.ttl_s:
            return None
        return pending

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._items)

    def _expire(self) -> None:
        now = self.clock()
        while self._items:
            oldest = next(iter(self._items.values()))
            if now - oldest.created_at <= self.ttl_s:
                break
            del self._items[oldest.state]
