"""Every error is JSON `{"error": message, "field": name}` with a 4xx the client can act on: `field` names the
field at fault, or is "body" for a body that cannot be read at all (malformed JSON, not UTF-8, nested too deep, a
broken multipart, too large, too slow), and is null only for what is about no field (401, 403, 404, 429, 500).
An unexpected failure is a 500 that says only its trace id (the traceback goes to the server's log).

Every response, errors and the 500s included, carries X-Trace-Id and the security headers defined here: the
application's outermost middleware adds them (app.SecureResponses), and server.py's 400, the one answer sent before
the application, has them from `security_headers`."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citerag.answer.generators.base import GeneratorError
from citerag.app.models import EmptyCollection
from citerag.errors import FULL, CiteragError, StoreUnavailable

log = logging.getLogger("citerag.service")
BODY = "body"  # the field of an error about the request body as a whole
TRACE_HEADER = "X-Trace-Id"
# The page's own scripts and styles only; nothing inline, nothing from elsewhere, never framed. A route may set
# its own (an original is served under a sandbox).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, headers


def not_found(what: str) -> ApiError:
    return ApiError(404, f"{what} not found")


def body(message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": message, "field": field}


def security_headers(trace_id: str) -> list[tuple[bytes, bytes]]:
    """The headers of a response sent outside the application (raw, as a server writes them)."""
    pairs = {TRACE_HEADER: trace_id, **SECURITY_HEADERS}
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in pairs.items()]


def _field(loc: tuple[Any, ...]) -> str:
    # ("body", "question") -> "question"; ("query", "ids") -> "ids"; ("path", "document_id") -> "document_id";
    # ("body", 17) -> "body": a number right after "body" is a character offset (json_invalid), not a field.
    if len(loc) > 1 and loc[0] == "body" and isinstance(loc[1], int):
        return BODY
    parts = [str(p) for p in loc[1:]] if loc and loc[0] in ("body", "query", "path", "header", "cookie") else \
        [str(p) for p in loc]
    return ".".join(parts) or BODY


def _not_json(error: Any, doc: Any) -> str:
    """FastAPI's json_invalid error as JSON's own message: what was expected, at which line and column."""
    reason, pos = (error.get("ctx") or {}).get("error", "invalid JSON"), error.get("loc", ("body", 0))[-1]
    where = str(json.JSONDecodeError(reason, doc, pos)) if isinstance(doc, str) and isinstance(pos, int) else reason
    return f"the body is not valid JSON: {where}"


def _unreadable(exc: StarletteHTTPException) -> str:
    """Why the framework could not read a body (its own message says only "error parsing the body")."""
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not UTF-8 JSON: byte {cause.start} is not UTF-8"
    if isinstance(cause, RecursionError):
        return "the body is nested too deeply to read"
    return f"the body could not be read: {exc.detail}"


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return JSONResponse(body(exc.message, exc.field), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        field = _field(tuple(first.get("loc", ())))
        if first.get("type") == "json_invalid":
            return JSONResponse(body(_not_json(first, exc.body), BODY), status_code=422)
        problems = "; ".join(f"{_field(tuple(e.get('loc', ())))}: {e.get('msg', 'invalid')}" for e in exc.errors())
        return JSONResponse(body(problems or "invalid request", field), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # The framework's only 400s are bodies it could not read (FastAPI's JSON, Starlette's multipart and form
        # parsers); this code's own refusals are ApiErrors, and its other statuses name no field (404, 405).
        if exc.status_code == 400:
            return JSONResponse(body(_unreadable(exc), BODY), status_code=400, headers=exc.headers)
        return JSONResponse(body(str(exc.detail)), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(EmptyCollection)
    async def empty(request: Request, exc: EmptyCollection) -> JSONResponse:
        return JSONResponse(body(str(exc)), status_code=409)

    @app.exception_handler(StoreUnavailable)
    async def unavailable(request: Request, exc: StoreUnavailable) -> JSONResponse:
        if exc.cause == FULL:  # Insufficient Storage: the server's disk, not anything the client sent
            return JSONResponse(body(f"the server's disk is full, nothing was stored: {exc}"), status_code=507)
        return JSONResponse(body(f"the store is unavailable: {exc}"), status_code=503)

    @app.exception_handler(GeneratorError)
    async def generator(request: Request, exc: GeneratorError) -> JSONResponse:
        return JSONResponse(body(f"the answer's generator failed: {exc}"), status_code=502)

    @app.exception_handler(CiteragError)
    async def citerag_error(request: Request, exc: CiteragError) -> JSONResponse:
        return JSONResponse(body(str(exc)), status_code=422)

    @app.exception_handler(OSError)
    async def disk(request: Request, exc: OSError) -> JSONResponse:
        # The server's own disk, said as such (nothing the client sent was wrong; nothing was half stored).
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return JSONResponse(body("the server's disk is full: nothing was stored; try again when space is "
                                     "freed"), status_code=507)
        if exc.errno == errno.EROFS:
            return JSONResponse(body("the server's storage is read-only: nothing was stored"), status_code=503)
        return await unexpected(request, exc)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return internal_error(request, exc)


def internal_error(request: Request, exc: BaseException) -> JSONResponse:
    """The 500 of a failure nothing handles: its trace id for the client, its traceback for the log."""
    trace = getattr(request.state, "trace_id", "-")
    log.error("unexpected error (trace %s)", trace, exc_info=exc)
    return JSONResponse(body(f"internal error (trace id {trace})"), status_code=500)


class LimitBody:
    """Refuse request bodies over `limit` bytes with a 413, by Content-Length up front or while a chunked body
    streams in, before the multipart parser spools it to disk; and a body that stops arriving for `pause_s`
    with a 408, so a slow client cannot hold a request (and its spooled upload) open for ever.

    The refusal is not raised through the application (the middlewares inside run receive() in a task group and
    would wrap it into a 400 "error parsing the body"): the application is told the client went away, its own
    answer is dropped, and this one is sent instead."""

    def __init__(self, app: ASGIApp, limit: int, pause_s: float = 30.0) -> None:
        self.app, self.limit, self.pause_s = app, limit, pause_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _too_large(send, self.limit)
            return
        seen = 0
        started = False
        body_done = False
        refusal: tuple[int, str] | None = None

        async def counted() -> Message:
            nonlocal seen, body_done, refusal
            if refusal is not None:
                return {"type": "http.disconnect"}
            if body_done:  # after the body, receive() waits for a disconnect (server-sent events): no timeout
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.pause_s)
            except TimeoutError:
                refusal = (408, f"the request body paused for over {self.pause_s:g} s: send it again")
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if seen > self.limit:
                    refusal = (413, f"request body over the limit of {self.limit / 1048576:g} MB")
                    return {"type": "http.disconnect"}
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refusal is not None and not started:
                return  # the application's answer to a body it never got whole
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except Exception:
            if refusal is None:
                raise
        if refusal is not None and not started:
            await _refuse(send, *refusal)


async def _too_large(send: Send, limit: int) -> None:
    await _refuse(send, 413, f"request body over the limit of {limit / 1048576:g} MB")


async def _refuse(send: Send, status: int, message: str) -> None:
    response = JSONResponse(body(message, BODY), status_code=status)  # headers added by SecureResponses
    await send({"type": "http.response.start", "status": status, "headers": response.raw_headers})
    await send({"type": "http.response.body", "body": response.body})
