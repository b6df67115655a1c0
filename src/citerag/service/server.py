"""Running the application under uvicorn, guarded against slow clients.

uvicorn closes idle keep-alive connections, but a connection that sends its request head a byte at a time, or
never, is kept forever (any data resets its keep-alive timer): a few thousand such clients use up the process's
file descriptors and nobody else gets in. `GuardedH11Protocol` gives every request head `client_timeout_s` to
arrive complete and then closes the connection; the body's pauses are bounded by `errors.LimitBody`. Written
here because uvicorn has no such setting and a proxy in front is not always there; it hooks only
connection_made, on_response_complete and connection_lost of uvicorn's h11 protocol (uvicorn is pinned), and
send_400_response, so that a request h11 cannot parse (`Content-Length: -5`) is answered in the service's error
shape with the headers every response carries, not as uvicorn's bare text/plain.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from citerag.service import errors


def guarded_protocol(client_timeout_s: float) -> type[H11Protocol]:
    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # the next request on this connection gets the same time for its head

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(client_timeout_s, self._head_timeout)

        def _head_timeout(self) -> None:
            # Still waiting for (the rest of) a request head: h11 leaves IDLE once a whole head has arrived.
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def send_400_response(self, msg: str) -> None:
            # Called inside uvicorn's `except h11.RemoteProtocolError`: h11's reason ("bad Content-Length") is the
            # exception being handled. It names no field: the request as a whole is not HTTP/1.1. No request span
            # exists yet, so the trace id is a fresh one, logged with the reason for the operator to find.
            reason = str(sys.exc_info()[1] or "")[:200]  # h11 may quote the line it could not read: kept short
            message = f"the request is not valid HTTP/1.1: {reason}" if reason else "the request is not valid HTTP/1.1"
            trace_id = uuid.uuid4().hex
            self.logger.info("%s (trace %s)", message, trace_id)
            payload = json.dumps(errors.body(message)).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                       (b"connection", b"close"), *errors.security_headers(trace_id)]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=payload), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return GuardedH11Protocol


def run(app: Any, host: str, port: int, client_timeout_s: float, forwarded_allow_ips: str | None = None) -> None:
    """Serve `app`. Proxy headers (X-Forwarded-For, X-Forwarded-Proto) are read only from `forwarded_allow_ips`:
    uvicorn's default believes them from 127.0.0.1 (or from FORWARDED_ALLOW_IPS), so behind a local proxy every
    client could name its own address, and get a fresh rate-limit budget with each one."""
    proxied = forwarded_allow_ips is not None
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=10,
                http=guarded_protocol(client_timeout_s), proxy_headers=proxied,
                forwarded_allow_ips=forwarded_allow_ips if proxied else "")
