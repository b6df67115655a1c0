"""A real citerag server on a real socket (uvicorn on 127.0.0.1, an ephemeral port), for the service tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from citerag.service.app import create_app
from citerag.service.state import ServiceConfig
from citerag.settings import Settings


class LiveServer:
    def __init__(self, home: Path, config: ServiceConfig, port: int = 0, **settings: Any) -> None:
        self.home = home
        self.app = create_app(Settings(index_dir=home, **settings), config)
        # IPPROTO_TCP, not 0: asyncio turns TCP_NODELAY on only then (else every response waits ~40 ms on Nagle).
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", port))  # a port given: the one an OIDC provider redirects to
        self.port = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", timeout_graceful_shutdown=5))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True)

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)

    @property
    def service(self) -> Any:
        return self.app.state.service


@contextmanager
def live_server(home: Path, config: ServiceConfig | None = None, **settings: Any) -> Iterator[LiveServer]:
    server = LiveServer(home, config or ServiceConfig(), **settings).start()
    try:
        yield server
    finally:
        server.stop()


def wait_settled(client: httpx.Client, collection: str, ids: list[int], timeout: float = 300) -> list[dict[str, Any]]:
    """Poll until none of the documents is pending or has a job; their final JSON."""
    deadline = time.monotonic() + timeout
    while True:
        docs = [client.get(f"/v1/collections/{collection}/documents/{i}").json() for i in ids]
        if all(d["status"] != "pending" and d["job"] is None for d in docs):
            return docs
        if time.monotonic() > deadline:
            raise AssertionError(f"documents still pending after {timeout}s: {docs}")
        time.sleep(0.2)
