"""Who may see what. A key sees one collection (or all, for a server admin key); anything it may not see is a
404, exactly as if it did not exist, on every route: never a 200 with another collection's text, never a
403 that confirms a name. A collection it sees but may not change is a 403.

A key comes as `Authorization: Bearer crk_...` or as the page's session cookie, which holds a session reference
(citerag.keystore.base), never the key. A browser attaches that cookie on its own, so a write that carries it must
come from the page itself (`check_origin`: cross-site request forgery); a browser never attaches a Bearer header on
its own, so those requests are not checked."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Annotated, Literal
from urllib.parse import urlsplit

from fastapi import Depends, Path, Request

from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.keystore.base import LOCAL, PREFIX, Principal
from citerag.service.errors import ApiError
from citerag.service.oidc import OidcError, usable_groups
from citerag.service.schemas import COLLECTION_NAME
from citerag.service.state import Service

COOKIE = "citerag_session"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# Sec-Fetch-Site values of a request the page itself made (same-origin) or the user did (none: typed, bookmarked).
OWN_SITES = frozenset({"same-origin", "none"})
_DEFAULT_PORTS = {"http": 80, "https": 443}

Credential = tuple[Literal["bearer", "cookie"], str] | None


def service(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc


def credential(request: Request) -> Credential:
    """What the request presents: a Bearer key (which wins) or the session cookie's reference; None: neither."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return "bearer", token.strip()
    session = request.cookies.get(COOKIE)
    return ("cookie", session) if session else None


def authenticate(svc: Service, presented: Credential) -> Principal | None:
    """The principal of a credential: a live key, or an ID token of the server's OpenID Connect provider, for
    Bearer; a live session of a live key or of a signed-in user for the cookie."""
    if presented is None:
        return None
    kind, token = presented
    if kind == "cookie":
        return _signed_in(svc, svc.keys.verify_session(token))
    if token.startswith(PREFIX) or svc.oidc is None:
        return svc.keys.verify(token)
    try:
        identity = svc.oidc.verify_bearer(token)
    except OidcError:
        return None
    return _signed_in(svc, Principal(f"user:{identity.name}", None, "read", identity.name,
                                     frozenset(usable_groups(identity))))


def _signed_in(svc: Service, who: Principal | None) -> Principal | None:
    """A signed-in user (no key: `user:NAME`) administers every collection when in the configured admin group."""
    admins = svc.config.oidc_admin_group
    if who is not None and who.key.startswith("user:") and admins is not None and admins in who.groups:
        return replace(who, scope="admin")
    return who


def principal(request: Request) -> Principal:
    svc = service(request)
    presented = credential(request)
    if presented is None or presented[0] == "cookie":
        check_origin(request, cookie=presented is not None and svc.config.keys_required)
    found = LOCAL
    if svc.config.keys_required:
        verified = authenticate(svc, presented)
        if verified is None:
            limit(svc, request, None)  # failed guesses are counted too, per client address
            raise ApiError(401, "a valid API key is required (Authorization: Bearer crk_...)")
        found = verified
    limit(svc, request, found)
    return found


def bearer_principal(request: Request, count: bool = True) -> Principal:
    """The principal of a Bearer key alone (the MCP endpoint: no session cookie, so no forgery to check), or a
    401; `count`: the request counts against the rate limit (once per HTTP request, not per tool call)."""
    svc = service(request)
    found = LOCAL
    if svc.config.keys_required:
        presented = credential(request)
        verified = authenticate(svc, presented) if presented is not None and presented[0] == "bearer" else None
        if verified is None:
            if count:
                limit(svc, request, None)
            raise ApiError(401, "a valid API key is required (Authorization: Bearer crk_...)")
        found = verified
    if count:
        limit(svc, request, found)
    return found


def check_origin(request: Request, *, cookie: bool) -> None:
    """Refuse (403) a write a browser was made to send from elsewhere: another site, and what SameSite=Strict
    lets through, another port of this host or a sibling subdomain. Reads are not checked: they change nothing,
    and a link the page opens (a source, its text) is a navigation that carries the cookie alone.

    - `Sec-Fetch-Site`, when sent (every current browser; a page cannot forge it), must be same-origin or none.
    - `Origin`, when sent, must be this server's own origin: scheme://host[:port] of the request (the scheme is
      the proxy's only when --forwarded-allow-ips trusts it). `null` (a sandboxed frame, a redirect) is not.
    - Neither header on a write authenticated by the cookie (`cookie`): refused. Every browser since 2020 sends
      Origin on a cross-site POST, and on every fetch() or form POST but a same-origin GET, so a write with the
      cookie and without Origin is a client that is not a browser, an old one, or one that strips it: that is
      exactly where forgery cannot be ruled out, and a script has its key to send as Bearer instead. Without the
      cookie (a sign-in, a server without keys), a request without either header is curl's and goes through.
    """
    if request.method not in UNSAFE_METHODS:
        return
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if site is not None and site.strip().lower() not in OWN_SITES:
        raise ApiError(403, f"refused: a {site.strip().lower()[:20]} request may not change anything here "
                            "(cross-site request forgery); send the key as Authorization: Bearer")
    if origin is not None and (_origin(origin) is None or _origin(origin) != own_origin(request)):
        raise ApiError(403, "refused: this request comes from another origin (cross-site request forgery); "
                            "send the key as Authorization: Bearer (behind a proxy, --forwarded-allow-ips lets "
                            "the server know its own scheme)")
    if origin is None and site is None and cookie:
        raise ApiError(403, "refused: a write authenticated by the session cookie must carry the browser's Origin "
                            "header; send the key as Authorization: Bearer")


def own_origin(request: Request) -> tuple[str, str, int] | None:
    """(scheme, host, port) this request was sent to, from its Host header."""
    return _origin(f"{request.url.scheme}://{request.headers.get('host', '')}")


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) with the scheme's default port filled in; None for anything not an http(s) origin."""
    try:
        parts = urlsplit(url.strip().lower())
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.username is not None or parts.path \
            or parts.query or parts.fragment:
        return None
    return parts.scheme, parts.hostname, port if port is not None else _DEFAULT_PORTS[parts.scheme]


def limit(svc: Service, request: Request, who: Principal | None) -> None:
    """Count the request: against the key's budget for a valid key, else against the client's address."""
    if svc.limiter is None:
        return
    identity = f"key:{who.key}" if who is not None and who is not LOCAL else \
        f"addr:{request.client.host if request.client else '-'}"
    verdict = svc.limiter.hit(identity)
    if not verdict.allowed:
        raise ApiError(429, f"over the rate limit of {svc.limiter.rate} for this "
                            f"{'key' if identity.startswith('key:') else 'address'}: retry in "
                            f"{verdict.retry_after_s} s", headers={"Retry-After": str(verdict.retry_after_s)})


def server_admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.server_admin:
        raise ApiError(403, "creating collections needs a server admin key")
    return who


def collection_for(scope: str) -> Callable[..., Collection]:
    """A dependency giving the path's collection if the caller may `scope` it; 404 if it may not see it."""

    def dependency(request: Request, name: Annotated[str, Path(pattern=COLLECTION_NAME, max_length=64)],
                   who: Annotated[Principal, Depends(principal)]) -> Collection:
        svc = service(request)
        if not who.sees(name) or name not in svc.app.collection_names():
            raise ApiError(404, f"collection {name!r} not found")
        if not who.may(name, scope):
            raise ApiError(403, f"this key may not {'change' if scope == 'write' else 'administer'} "
                                f"collection {name!r}")
        try:
            return svc.app.collection(name)
        except CiteragError:
            raise ApiError(404, f"collection {name!r} not found") from None

    return dependency


reader = collection_for("read")
writer = collection_for("write")
admin = collection_for("admin")

# Route parameters: `collection: Readable` is the path's collection, checked for the caller.
Readable = Annotated[Collection, Depends(reader)]
Writable = Annotated[Collection, Depends(writer)]
Administrable = Annotated[Collection, Depends(admin)]
ServiceDep = Annotated[Service, Depends(service)]
Caller = Annotated[Principal, Depends(principal)]
