"""A slow or huge client cannot take `citerag serve` down: hundreds of connections that never finish their request
head, a body that stops arriving, and a body streamed past the size limit, while other clients keep being
served. The real command in a real process (its uvicorn protocol is what guards the heads)."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from http_servers import citerag_serve

IDLE, TRICKLING = 300, 40
TIMEOUT_S = 2
# What every response carries, whoever sent it (the application, its body limit, or the protocol before it).
SECURITY = {"content-security-policy": "default-src 'self'", "x-content-type-options": "nosniff",
            "referrer-policy": "no-referrer", "x-frame-options": "DENY"}


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[str]:
    with citerag_serve(tmp_path / "home", "--no-keys", "--client-timeout", str(TIMEOUT_S),
                       "--max-upload-mb", "1") as url:
        yield url


def _closed_by_server(sock: socket.socket, limit_s: float = 60) -> bytes:
    """What the server sent before closing the connection (raises if it never closes it)."""
    sock.settimeout(limit_s)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def _head(reply: bytes) -> dict[str, str]:
    lines = reply.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")[1:]
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


def _secured(headers: dict[str, str] | httpx.Headers) -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", headers.get("x-trace-id", "")), dict(headers)
    for name, value in SECURITY.items():
        assert headers.get(name, "").startswith(value), (name, dict(headers))


def test_connections_that_never_finish_their_head_are_cut_off_and_others_are_served(server: str) -> None:
    host, port = server.removeprefix("http://").split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(IDLE)]
    partial = [socket.create_connection((host, int(port))) for _ in range(TRICKLING)]
    stop = threading.Event()

    def trickle() -> None:  # one byte of a never-ending header per connection, every half second
        while not stop.is_set():
            for s in partial:
                with contextlib.suppress(OSError):
                    s.sendall(b"X")
            time.sleep(0.5)

    for s in partial:
        s.sendall(b"GET /v1/collections HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    try:
        with httpx.Client(base_url=server, timeout=30) as client:  # everyone else meanwhile
            codes = [client.get("/v1/collections").status_code for _ in range(20)]
        assert codes == [200] * 20
        assert all(_closed_by_server(s) == b"" for s in idle)  # closed without a response
        assert all(_closed_by_server(s) == b"" for s in partial)
    finally:
        stop.set()
        for s in idle + partial:
            s.close()
    assert httpx.get(server + "/v1/collections", timeout=30).status_code == 200


def test_a_body_that_stops_arriving_gets_408_and_one_streamed_past_the_limit_413(server: str, tmp_path: Path) -> None:
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as slow:
        slow.sendall(b"POST /v1/collections/default/documents HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n--b\r\n")
        reply = _closed_by_server(slow)
    assert reply.startswith(b"HTTP/1.1 408") and b"paused for over 2 s" in reply
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["field"] == "body"
    _secured(_head(reply))

    def endless() -> Iterator[bytes]:  # a chunked body with no Content-Length: counted as it streams in
        yield b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.txt\"\r\n\r\n"
        for _ in range(64):
            yield b"x" * 65536

    big = httpx.post(server + "/v1/collections/default/documents", content=endless(), timeout=60,
                     headers={"Content-Type": "multipart/form-data; boundary=b"})
    assert big.status_code == 413 and "over the limit of 1 MB" in big.json()["error"]
    assert big.json()["field"] == "body"
    _secured(big.headers)
    files = tmp_path / "home" / "files"
    assert not files.exists() or not any(files.iterdir())  # nothing of it was kept
    assert httpx.get(server + "/v1/collections", timeout=30).status_code == 200


@pytest.mark.parametrize("head", [b"Content-Length: -5", b"Content-Length: 1, 2", b"Bad Header Line"])
def test_a_request_http_cannot_parse_gets_the_error_shape_and_the_headers(server: str, head: bytes) -> None:
    """Refused by the protocol (h11) before the application sees it: still JSON in the error shape, with the
    headers every response carries (uvicorn's own 400 is a bare text/plain)."""
    host, port = server.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/collections/default/search HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n\r\nhello")
        reply = _closed_by_server(sock, 30)
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]
    headers = _head(reply)
    assert headers["content-type"] == "application/json", headers
    body = json.loads(reply.partition(b"\r\n\r\n")[2])
    assert set(body) == {"error", "field"} and body["field"] is None, body
    assert body["error"].startswith("the request is not valid HTTP/1.1"), body
    _secured(headers)
    assert httpx.get(server + "/v1/collections", timeout=30).status_code == 200
