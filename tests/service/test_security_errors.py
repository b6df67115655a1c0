"""One error shape and the security headers on every response (issue 25, hole 8).

Every error is JSON `{"error": message, "field": name}`: a field's name, "body" for a body that cannot be read
(malformed JSON, bytes that are not UTF-8, nesting too deep, a broken multipart, one too large or too slow), never
a character offset and never null for such a body; null only for what names no field (401, 404, 500). Every
response, the refusals of the body limit (413, 408) and the 500s included, carries X-Trace-Id and the security
headers. Request bodies and path ids are strict: `true` is not an integer, "yes" is not a boolean, `1.0` and `+1`
are not document ids (a JSON integer is still a number)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live import LiveServer, live_server
from service_fixtures import Deployment

from citerag.service.app import CSP, create_app
from citerag.service.state import ServiceConfig
from citerag.settings import Settings

ASK = "/v1/collections/default/ask"
SEARCH = "/v1/collections/default/search"
UPLOAD = "/v1/collections/default/documents"
SANDBOX = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"  # routes/documents.py


def assert_secured(headers: Any, csp: str = CSP) -> None:
    """The headers every response carries, whoever answered it."""
    assert re.fullmatch(r"[0-9a-f]{32}", headers.get("x-trace-id", "")), dict(headers)
    assert headers.get("content-security-policy") == csp, dict(headers)
    assert headers.get("x-content-type-options") == "nosniff", dict(headers)
    assert headers.get("referrer-policy") == "no-referrer", dict(headers)
    assert headers.get("x-frame-options") == "DENY", dict(headers)


def assert_error(response: httpx.Response, status: int | tuple[int, ...], field: str | None) -> dict[str, Any]:
    statuses = status if isinstance(status, tuple) else (status,)
    assert response.status_code in statuses, response.text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error", "field"} and isinstance(body["error"], str) and body["error"], body
    assert body["field"] == field, body
    assert_secured(response.headers)
    return body


# --- bodies that cannot be read: the field is "body" ---------------------------------------------------------

JSON = {"content-type": "application/json"}
DEEP = b'{"question": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(("path", "content", "headers"), [
    (ASK, b'{"question": "x",, "k": 2}', JSON),  # pydantic's loc is ("body", 17): an offset, not a field
    (ASK, b'{"question": "x", "k": 2', JSON),  # cut short
    (ASK, b'{"question": "caf\xe9"}', JSON),  # Latin-1, not UTF-8
    (ASK, DEEP, JSON),  # nested past the JSON parser's recursion limit
    (ASK, b"[1, 2]", JSON),  # JSON, but not an object
    (SEARCH, b"", JSON),  # no body at all
    (UPLOAD, b"--b\r\n", {"content-type": "multipart/form-data"}),  # no boundary
], ids=["syntax", "cut-short", "not-utf8", "too-deep", "not-an-object", "empty", "multipart-no-boundary"])
def test_a_body_that_cannot_be_read_names_the_body(deployment: Deployment, path: str, content: bytes,
                                                   headers: dict[str, str]) -> None:
    with deployment.server.client(deployment.admin) as c:
        body = assert_error(c.post(path, content=content, headers=headers), (400, 422), "body")
    assert "Traceback" not in body["error"]


def test_a_syntax_error_says_where_in_the_message_not_as_the_field(deployment: Deployment) -> None:
    with deployment.server.client(deployment.admin) as c:
        body = assert_error(c.post(ASK, content=b'{"question": "x",, "k": 2}', headers=JSON), 422, "body")
    assert "JSON" in body["error"] and "column 18" in body["error"], body


# --- strict types in bodies and path ids ----------------------------------------------------------------------

@pytest.mark.parametrize(("path", "payload", "field"), [
    (ASK, {"question": "x", "k": True}, "k"),
    (ASK, {"question": "x", "stream": "yes"}, "stream"),
    (ASK, {"question": "x", "stream": 1}, "stream"),
    (ASK, {"question": "x", "max_sources": False}, "max_sources"),
    (ASK, {"question": "x", "threshold": True}, "threshold"),
    (ASK, {"question": "x", "threshold": "0.5"}, "threshold"),
    (SEARCH, {"query": "x", "k": "3"}, "k"),
    (SEARCH, {"query": "x", "k": 2.0}, "k"),
    ("/v1/collections", {"name": "strict-bodies", "settings": {"k": True}}, "settings.k"),
    ("/v1/collections", {"name": "strict-bodies", "settings": {"target": "512"}}, "settings.target"),
])
def test_loose_types_in_a_body_are_a_422_naming_the_field(deployment: Deployment, path: str,
                                                          payload: dict[str, Any], field: str) -> None:
    with deployment.server.client(deployment.admin) as c:
        assert_error(c.post(path, json=payload), 422, field)
        assert "strict-bodies" not in [x["name"] for x in c.get("/v1/collections").json()["collections"]]


def test_a_json_integer_is_still_a_number(deployment: Deployment) -> None:
    with deployment.server.client(deployment.reader_a) as c:
        asked = c.post(ASK, json={"question": "How do I keep a log of root activity?", "threshold": 1, "k": 3})
        assert asked.status_code == 200, asked.text
        assert_secured(asked.headers)


@pytest.mark.parametrize("spelling", ["{id}.0", "+{id}", "%20{id}", "{id}%20", "{id}e0", "0x{hex}", "{id}_0",
                                      "%D9%A1", "-{id}", "{id}.5"])
def test_a_document_id_is_decimal_digits_only(deployment: Deployment, spelling: str) -> None:
    doc_id = min(deployment.ids.values())
    given = spelling.format(id=doc_id, hex=f"{doc_id:x}")
    with deployment.server.client(deployment.admin) as c:
        assert c.get(f"{UPLOAD}/{doc_id}").status_code == 200
        assert c.get(f"{UPLOAD}/0{doc_id}").status_code == 200  # leading zeros are still decimal digits
        for route in ("", "/text", "/file"):
            assert_error(c.get(f"{UPLOAD}/{given}{route}"), 422, "document_id")
        assert_error(c.delete(f"{UPLOAD}/{given}"), 422, "document_id")


def test_the_schema_still_says_a_document_id_is_an_integer() -> None:
    spec = create_app(Settings(index_dir=Path("/nonexistent/citerag-schema"))).openapi()
    (param,) = [p for p in spec["paths"]["/v1/collections/{name}/documents/{document_id}"]["get"]["parameters"]
                if p["name"] == "document_id"]
    assert param["schema"]["type"] == "integer" and param["schema"]["minimum"] == 1, param


# --- the headers on every response ---------------------------------------------------------------------------

def test_the_deployment_s_responses_carry_the_headers(deployment: Deployment) -> None:
    doc_id = deployment.ids["vtt-youtube-dl.vtt"]
    with deployment.server.client() as anonymous:
        assert_error(anonymous.get("/v1/collections"), 401, None)
    with deployment.server.client(deployment.admin) as c:
        assert_error(c.get("/v1/no-such-route"), 404, None)
        assert_error(c.get(f"{UPLOAD}/{2**40}"), 404, None)
        original = c.get(f"{UPLOAD}/{doc_id}/file")
        assert original.status_code == 200
        assert_secured(original.headers, SANDBOX)  # a route's own policy stays
        for ok in (c.get("/"), c.get("/healthz"), c.get(f"{UPLOAD}/{doc_id}")):
            assert ok.status_code == 200 and ok.text
            assert_secured(ok.headers)
        with c.stream("POST", ASK, json={"question": "How do I keep a log of root activity?", "stream": True}) as s:
            assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
            assert_secured(s.headers)
            s.read()


@pytest.fixture()
def small(tmp_path: Path) -> Iterator[LiveServer]:
    """A server with a 1 MB body limit and a 1 s body pause, no keys (loopback), a route that fails."""
    config = ServiceConfig(keys_required=False, max_upload_mb=1, client_timeout_s=1)
    with live_server(tmp_path / "home", config) as server:
        def fails() -> None:
            raise RuntimeError("a bug the handlers do not know")

        server.app.add_api_route("/v1/test-only-failure", fails)
        yield server


def raw(server: LiveServer, request: bytes, limit_s: float = 30) -> tuple[int, dict[str, str], bytes]:
    """Send `request` on a socket of its own; the status, headers and body the server answered with."""
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(request)
        sock.settimeout(limit_s)
        received = b""
        while b"\r\n\r\n" not in received or not _complete(received):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def _complete(received: bytes) -> bool:
    head, _, body = received.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return length is not None and len(body) >= int(length.group(1))


def _shape(headers: dict[str, str], body: bytes, field: str | None) -> dict[str, Any]:
    assert headers["content-type"].startswith("application/json"), headers
    data = json.loads(body)
    assert set(data) == {"error", "field"} and isinstance(data["error"], str) and data["field"] == field, data
    assert_secured(headers)
    return data


def test_a_body_declared_over_the_limit_gets_413_with_the_headers(small: LiveServer) -> None:
    status, headers, body = raw(small, b"POST /v1/collections/default/documents HTTP/1.1\r\nHost: x\r\n"
                                       b"Content-Type: multipart/form-data; boundary=b\r\n"
                                       b"Content-Length: 5000000\r\n\r\n")
    assert status == 413
    assert "over the limit of 1 MB" in _shape(headers, body, "body")["error"]


def test_a_body_streamed_past_the_limit_gets_413_with_the_headers(small: LiveServer) -> None:
    def endless() -> Iterator[bytes]:
        yield b"--b\r\nContent-Disposition: form-data; name=\"files\"; filename=\"big.txt\"\r\n\r\n"
        for _ in range(32):
            yield b"x" * 65536

    response = httpx.post(small.url + UPLOAD, content=endless(), timeout=60,
                          headers={"Content-Type": "multipart/form-data; boundary=b"})
    assert "over the limit" in assert_error(response, 413, "body")["error"]


def test_a_body_that_pauses_gets_408_with_the_headers(small: LiveServer) -> None:
    status, headers, body = raw(small, b"POST /v1/collections/default/documents HTTP/1.1\r\nHost: x\r\n"
                                       b"Content-Type: multipart/form-data; boundary=b\r\n"
                                       b"Content-Length: 1000\r\n\r\n--b\r\n")
    assert status == 408
    assert "paused" in _shape(headers, body, "body")["error"]


def test_a_500_carries_the_headers_and_says_only_its_trace_id(small: LiveServer) -> None:
    response = httpx.get(small.url + "/v1/test-only-failure", timeout=30)
    body = assert_error(response, 500, None)
    assert body["error"] == f"internal error (trace id {response.headers['x-trace-id']})"
    assert "bug" not in body["error"]
    assert httpx.get(small.url + "/v1/collections", timeout=30).status_code == 200  # and the server goes on


def test_static_files_and_405s_carry_the_headers(small: LiveServer) -> None:
    with small.client() as c:
        script = c.get("/static/app.js")
        assert script.status_code == 200
        assert_secured(script.headers)
        assert_error(c.get("/static/no-such-file.js"), 404, None)
        assert_error(c.put("/v1/collections"), 405, None)
