"""Running the application under uvicorn, guarded against slow clients.

uvicorn closes idle keep-alive connections, but a connection that sends its request head a byte at a time, or
never, is kept forever (any data resets its keep-alive timer): a few thousand such clients use up the process's
file descriptors and nobody else gets in. `GuardedH11Protocol` gives every request head `client_timeout_s` to
arrive complete and then closes the connection; the body's pauses are bounded by `errors.LimitBody`. Written
here because uvicorn has no such setting and a proxy in front is not always there; it hooks only
connection_made, on_response_complete and connection_lost of uvicorn's h11 protocol (uvicorn is pinned).
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol


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

    return GuardedH11Protocol


def run(app: Any, host: str, port: int, client_timeout_s: float) -> None:
    uvicorn.run(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=10,
                http=guarded_protocol(client_timeout_s))
