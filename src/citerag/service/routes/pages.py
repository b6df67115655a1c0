"""The web page (static files, no build step) and the browser's session cookie."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from citerag.service.auth import COOKIE, ServiceDep, presented_key
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
    token = presented_key(request)
    return {"keys_required": svc.config.keys_required,
            "authenticated": not svc.config.keys_required or (token is not None and svc.keys.verify(token) is not None)}


@router.post("/v1/session", status_code=204, tags=["service"])
def login(body: SessionRequest, request: Request, svc: ServiceDep) -> Response:
    """Keep a key in an HttpOnly, same-site cookie, so that links the page opens (a source, its text) carry it."""
    if svc.keys.verify(body.key) is None:
        raise ApiError(401, "not a valid API key", "key")
    response = Response(status_code=204)
    response.set_cookie(COOKIE, body.key, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    return response


@router.delete("/v1/session", status_code=204, tags=["service"])
def logout() -> Response:
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, path="/")
    return response
