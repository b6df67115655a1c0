"""Sign-in through the organisation's OpenID Connect provider (citerag.service.oidc): the authorization code flow with
PKCE. `GET /v1/oidc/login` sends the browser to the provider; its callback checks the response, makes (or updates)
the user with the groups of the provider's claim, opens a browser session as `POST /v1/session` does for a key, and
returns to the page. Served only when the server was started with an issuer (`citerag serve --oidc-issuer`)."""

from __future__ import annotations

import hmac
import html
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from citerag.audit.base import event
from citerag.service.auth import COOKIE, ServiceDep, limit
from citerag.service.errors import ApiError
from citerag.service.oidc import Identity, OidcClient, OidcError, usable_groups
from citerag.service.state import Service

router = APIRouter(prefix="/v1/oidc", tags=["service"])
# The sign-in's state, also in a cookie of the browser that began it: a callback is taken only from that browser, so
# another site cannot sign a victim's browser in as the attacker with a callback URL the attacker got (login CSRF).
# SameSite=Lax: the provider's redirect back is a cross-site top-level GET, which carries it.
STATE_COOKIE = "citerag_oidc_state"


def _client(svc: Service) -> OidcClient:
    if svc.oidc is None:
        raise ApiError(404, "this server has no OpenID Connect sign-in (citerag serve --oidc-issuer URL)")
    return svc.oidc


@router.get("/login", response_class=RedirectResponse, status_code=302)
def login(request: Request, svc: ServiceDep) -> RedirectResponse:
    """To the provider's sign-in page; it comes back to the callback."""
    limit(svc, request, None)
    try:
        url, pending = _client(svc).start(str(request.url_for("oidc_callback")))
    except OidcError as exc:
        raise ApiError(502, str(exc)) from None
    svc.logins.add(pending)
    response = RedirectResponse(url, status_code=302)
    response.set_cookie(STATE_COOKIE, pending.state, max_age=600, httponly=True, samesite="lax", path="/v1/oidc",
                        secure=request.url.scheme == "https")
    return response


@router.get("/callback", response_class=HTMLResponse, name="oidc_callback")
def callback(request: Request, svc: ServiceDep, state: Annotated[str, Query(max_length=200)] = "") -> Response:
    """The provider's answer: the session cookie set, then back to the page. The last step is a page of this site
    that moves on by itself, so that the page opens from a same-site navigation, which carries the SameSite=Strict
    cookie (the redirect chain from the provider would not)."""
    limit(svc, request, None)
    client = _client(svc)
    if not hmac.compare_digest(request.cookies.get(STATE_COOKIE, ""), state):
        raise ApiError(400, "this sign-in was not begun in this browser: start it again from the page", "state")
    pending = svc.logins.pop(state)
    if pending is None:
        raise ApiError(400, "this sign-in is unknown, used or expired: start it again from the page", "state")
    try:
        identity = client.finish(pending, dict(request.query_params))
    except OidcError as exc:
        raise ApiError(400, str(exc)) from None
    token = _session(svc, identity)
    svc.audit.record(event(f"user:{identity.name}", "session.start", groups=usable_groups(identity), via="oidc"))
    response = HTMLResponse(f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url=/">'
                            f'<title>Signed in</title><p>Signed in as {html.escape(identity.name)}. '
                            '<a href="/">Continue</a></p>')
    previous = request.cookies.get(COOKIE)
    if previous:
        svc.keys.end_session(previous)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    response.delete_cookie(STATE_COOKIE, path="/v1/oidc")
    return response


def _session(svc: Service, identity: Identity) -> str:
    """The user made or updated with the provider's groups (the provider decides them, at every sign-in), and a new
    session for it."""
    svc.keys.put_user(identity.name, usable_groups(identity), origin="oidc")
    token = svc.keys.start_user_session(identity.name, svc.config.session_ttl_s)
    if token is None:  # removed between the two calls
        raise ApiError(409, "the user was removed during its sign-in: sign in again")
    return token
