"""The web page (static files, no build step) and the browser's session cookie.

Signing in trades a key for a session: a random reference in an HttpOnly, SameSite=Strict cookie, its hash kept in
the key store, bound to the key (revoking the key ends it), ending after `ServiceConfig.session_ttl_s` or at
sign-out, on the server, so a copied cookie opens nothing afterwards. The key itself never reaches the cookie.
The session routes count against the rate limit like every other route (per key for a valid key, per address
otherwise): without that, a throttled address could still try keys here. Their writes are checked against
cross-site forgery (citerag.service.auth.check_origin): a forged sign-in would put the victim's page on the
attacker's key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from citerag.service import recording
from citerag.service.auth import COOKIE, ServiceDep, authenticate, check_origin, credential, limit
from citerag.service.errors import ApiError
from citerag.service.schemas import SessionRequest

STATIC = Path(__file__).resolve().parent.parent / "static"
router = APIRouter()


@router.get("/", include_in_schema=False)
def index() -> FileResponse:
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/healthz", tags=["service"])
def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/v1/session", tags=["service"])
def session(request: Request, svc: ServiceDep) -> dict[str, Any]:
    who = authenticate(svc, credential(request))
    limit(svc, request, who)
    # The caller's own scope (and the collection its key is for): what the page shows, e.g. the admins' Sources.
    scope, collection = ("admin", None) if not svc.config.keys_required and who is None else \
        (who.scope, who.collection) if who is not None else (None, None)
    return {"keys_required": svc.config.keys_required,
            "authenticated": not svc.config.keys_required or who is not None, "scope": scope,
            "collection": collection, "oidc": svc.oidc is not None,
            # A signed-in user's name and groups (what decides the documents the page shows).
            "user": who.user if who is not None else None,
            "groups": sorted(who.groups) if who is not None else []}


@router.post("/v1/session", status_code=204, tags=["service"])
def login(body: SessionRequest, request: Request, svc: ServiceDep) -> Response:
    """Open a session for the key, in an HttpOnly, same-site cookie, so that links the page opens (a source, its
    text) carry it; the cookie holds the session's reference, never the key."""
    check_origin(request, cookie=False)
    who = svc.keys.verify(body.key)
    limit(svc, request, who)  # before the 401: past its budget, an address gets 429s, not verdicts on its guesses
    token = svc.keys.start_session(body.key, svc.config.session_ttl_s) if who is not None else None
    if token is None or who is None:
        raise ApiError(401, "not a valid API key", "key")
    previous = request.cookies.get(COOKIE)
    if previous:  # signing in again replaces the browser's session: the old one ends, not just its cookie
        svc.keys.end_session(previous)
    recording.record(svc.audit, who, "session.start", via="key")
    response = Response(status_code=204)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@router.delete("/v1/session", status_code=204, tags=["service"])
def logout(request: Request, svc: ServiceDep) -> Response:
    """End the session on the server (a copy of the cookie opens nothing afterwards) and drop the cookie."""
    presented = credential(request)
    token = presented[1] if presented is not None and presented[0] == "cookie" else None
    check_origin(request, cookie=token is not None)
    who = authenticate(svc, presented)
    limit(svc, request, who)
    if token is not None and svc.keys.end_session(token) and who is not None:
        recording.record(svc.audit, who, "session.end")
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response
