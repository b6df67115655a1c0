"""Issue 25, hole 4: the browser's session and cross-site request forgery, against a real server on a socket.

The cookie `POST /v1/session` sets is a session reference (its hash kept in the key store, bound to the key, ended
by logout and by revoking the key), never the key itself; a write that carries only that cookie is refused unless
the browser says it comes from the page's own origin (Origin, Sec-Fetch-Site), whichever port or sibling host the
forgery comes from; Bearer requests, which a browser never attaches by itself, are not checked.
"""

from __future__ import annotations

import hashlib
import itertools
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from live import LiveServer, live_server
from playwright.sync_api import Browser, expect

from citerag.keystore.sqlite import KEYS_FILE, SqliteKeyStore
from citerag.service.state import ServiceConfig
from system_tools import needs_chromium

EVIL = "http://evil.example"
_names = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(tmp_path_factory.mktemp("sessions-home"), ServiceConfig()) as live:
        yield live


@pytest.fixture(scope="module")
def writer(server: LiveServer) -> str:
    return SqliteKeyStore(server.home).create("default", "write")


def same_origin(server: LiveServer) -> dict[str, str]:
    """What Chromium sends with the page's own fetch() and XMLHttpRequest writes."""
    return {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}


def log_in(server: LiveServer, key: str) -> tuple[str, str]:
    """The session cookie (name, value) the server sets for `key`, as the page's sign-in form gets it."""
    with httpx.Client(base_url=server.url, timeout=60, headers=same_origin(server)) as c:
        response = c.post("/v1/session", json={"key": key})
    assert response.status_code == 204, response.text
    [(name, value)] = response.cookies.items()
    return name, value


def upload(c: httpx.Client, headers: dict[str, str] | None = None) -> httpx.Response:
    name = f"note-{next(_names)}.md"
    return c.post("/v1/collections/default/documents", headers=headers or {},
                  files=[("files", (name, f"# {name}\n\nA short note, {name}.\n".encode()))])


def cookie_client(server: LiveServer, cookie: tuple[str, str]) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=60, cookies={cookie[0]: cookie[1]})


def test_the_cookie_is_a_session_reference_stored_as_a_hash_never_the_key(server: LiveServer, writer: str) -> None:
    cookie = log_in(server, writer)
    assert writer not in cookie[1] and writer.split("_", 2)[2] not in cookie[1]
    with sqlite3.connect(server.home / KEYS_FILE) as db:
        stored = repr([db.execute(f"SELECT * FROM {t}").fetchall() for (t,) in
                       db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")])
    assert cookie[1] not in stored and hashlib.sha256(cookie[1].encode()).hexdigest() in stored
    with cookie_client(server, cookie) as c:
        assert c.get("/v1/collections").status_code == 200
        assert c.get("/v1/session").json()["authenticated"] is True


def test_logout_ends_the_session_on_the_server_and_revoking_the_key_ends_its_sessions(server: LiveServer) -> None:
    keys = SqliteKeyStore(server.home)
    key = keys.create("default", "read")
    kept, other = log_in(server, key), log_in(server, key)
    with cookie_client(server, kept) as c:
        response = c.delete("/v1/session", headers=same_origin(server))
        assert response.status_code == 204 and "max-age=0" in response.headers["set-cookie"].lower()
    with cookie_client(server, kept) as replayed:  # the old cookie, kept by whoever copied it: ended for good
        assert replayed.get("/v1/collections").status_code == 401
        assert replayed.get("/v1/session").json()["authenticated"] is False
    with cookie_client(server, other) as c:
        assert c.get("/v1/collections").status_code == 200  # another sign-in of the same key is its own session
        assert keys.revoke(key.split("_")[1])
        assert c.get("/v1/collections").status_code == 401


CROSS_SITE = {
    "another site": lambda url: {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"},
    "another port of this host": lambda url: {"Origin": url.rsplit(":", 1)[0] + ":1"},
    "a sibling subdomain": lambda url: {"Sec-Fetch-Site": "same-site"},
    "an opaque origin": lambda url: {"Origin": "null"},
    "the other scheme": lambda url: {"Origin": url.replace("http://", "https://")},
    "our origin but cross-site": lambda url: {"Origin": url, "Sec-Fetch-Site": "cross-site"},
    "neither header": lambda url: {},
}


@pytest.mark.parametrize("how", CROSS_SITE)
def test_a_write_carrying_only_the_cookie_is_refused_from_anywhere_but_the_page(server: LiveServer, writer: str,
                                                                              how: str) -> None:
    cookie = log_in(server, writer)
    headers = CROSS_SITE[how](server.url)
    with cookie_client(server, cookie) as c, server.client(writer) as bearer:
        before = bearer.get("/v1/collections/default/documents").json()["documents"]
        response = upload(c, headers)
        assert response.status_code == 403, response.text
        assert response.json()["field"] is None and isinstance(response.json()["error"], str)
        doc = upload(bearer).json()["documents"][0]["id"]
        assert c.delete(f"/v1/collections/default/documents/{doc}", headers=headers).status_code == 403
        assert c.post("/v1/collections/default/ask", json={"question": "note?"}, headers=headers).status_code == 403
        assert bearer.get(f"/v1/collections/default/documents/{doc}").status_code == 200  # not deleted
        assert len(bearer.get("/v1/collections/default/documents").json()["documents"]) == len(before) + 1


def test_the_page_writes_with_its_cookie_and_scripts_with_a_bearer_key_from_anywhere(server: LiveServer,
                                                                                    writer: str) -> None:
    cookie = log_in(server, writer)
    with cookie_client(server, cookie) as c:
        assert upload(c, same_origin(server)).status_code == 202
        assert upload(c, {"Origin": server.url}).status_code == 202  # no Sec-Fetch-Site: an older browser
        assert upload(c, {"Origin": server.url, "Sec-Fetch-Site": "none"}).status_code == 202  # user-initiated
        # Reads are not forgeries: a link the page opens (a source, its text) carries only the cookie.
        assert c.get("/v1/collections/default/documents", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200
    with server.client(writer) as bearer:  # a browser never attaches Authorization on its own
        assert upload(bearer, {"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}).status_code == 202
        assert upload(bearer).status_code == 202


def test_a_forged_sign_in_from_another_site_is_refused(server: LiveServer, tmp_path: Path) -> None:
    attackers = SqliteKeyStore(server.home).create("default", "write")  # logging the victim in as the attacker
    with httpx.Client(base_url=server.url, timeout=60) as c:
        response = c.post("/v1/session", json={"key": attackers}, headers={"Origin": EVIL,
                                                                           "Sec-Fetch-Site": "cross-site"})
        assert response.status_code == 403 and "set-cookie" not in response.headers
        assert c.post("/v1/session", json={"key": attackers}).status_code == 204  # curl: no browser headers



def test_a_server_without_keys_refuses_writes_from_other_sites_too(tmp_path: Path) -> None:
    # No credential at all: any page the developer opens could otherwise write to their loopback server.
    with live_server(tmp_path, ServiceConfig(keys_required=False)) as local, local.client() as c:
        forged = c.post("/v1/collections", json={"name": "planted"}, headers={"Origin": EVIL,
                                                                              "Sec-Fetch-Site": "cross-site"})
        assert forged.status_code == 403, forged.text
        assert c.post("/v1/collections", json={"name": "mine"}, headers=same_origin(local)).status_code == 201
        assert c.post("/v1/collections", json={"name": "scripted"}).status_code == 201  # curl: neither header
        assert [n["name"] for n in c.get("/v1/collections").json()["collections"]] == ["default", "mine",
                                                                                       "scripted"]


# Another port of the page's own host: the same site to the browser, so SameSite=Strict still sends the cookie.
# A no-cors fetch is a "simple" request (no preflight): it reaches the server, only its answer is hidden.
FORGERY = """<!doctype html><title>win a prize</title><script>
const form = new FormData();
form.append("files", new Blob(["# Planted\\n\\nPlanted by another origin.\\n"]), "planted.md");
fetch("%(target)s/v1/collections/default/documents", {method: "POST", body: form, mode: "no-cors",
                                                      credentials: "include"});
</script>"""


@contextmanager
def forger(target: str) -> Iterator[str]:
    """A page on another port of 127.0.0.1 that uploads to `target` with whatever cookies the browser holds."""
    body = (FORGERY % {"target": target}).encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@needs_chromium
def test_in_a_browser_the_page_signs_in_and_out_and_another_port_cannot_write(server: LiveServer, writer: str,
                                                                              browser: Browser) -> None:
    context = browser.new_context(base_url=server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        page.goto("/")
        page.fill("#key", writer)
        page.click("#key-submit")
        expect(page.locator("#app")).to_be_visible()
        [cookie] = [(c["name"], c["value"]) for c in context.cookies() if c["name"] == "citerag_session"]
        with server.client(writer) as bearer:
            doc = upload(bearer).json()["documents"][0]
            before = len(bearer.get("/v1/collections/default/documents").json()["documents"])
            page.click("#refresh")
            page.once("dialog", lambda dialog: dialog.accept())
            with page.expect_response(lambda r: r.request.method == "DELETE") as deleted:
                page.get_by_role("button", name=f"Delete {doc['name']}").click()
            assert deleted.value.status == 204  # the page's own writes pass the origin check
            with forger(server.url) as evil, page.expect_response(lambda r: r.request.method == "POST") as forged:
                page.goto(evil)
            # Chromium sends the cookie along (the old server, which kept the key in it, answered 202 and indexed
            # planted.md); the browser marks the request same-site, and its Origin is not the page's.
            assert forged.value.status == 403
            after = bearer.get("/v1/collections/default/documents").json()["documents"]
            assert len(after) == before - 1 and "planted.md" not in {d["name"] for d in after}
        page.goto("/")
        page.click("#sign-out")
        expect(page.locator("#key-form")).to_be_visible()
        with cookie_client(server, cookie) as replayed:  # signing out ended the session on the server
            assert replayed.get("/v1/collections").status_code == 401
    finally:
        context.close()
