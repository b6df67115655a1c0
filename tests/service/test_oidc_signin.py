"""Sign-in through a real OpenID Connect provider on loopback (oidc-provider under Node.js, tests/oidc): in Chromium
the page sends the user to the provider's own login and consent pages and back, and the user's groups (the
provider's `groups` claim) decide which documents the page lists and answers from; API clients send the provider's
ID token as a Bearer token; the admin group administers; a removed user's session ends."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from authlib.integrations.httpx_client import OAuth2Client
from live import LiveServer, wait_settled
from playwright.sync_api import Browser, expect

from citerag.keystore.sqlite import SqliteKeyStore
from citerag.service.oidc import OidcConfig
from citerag.service.state import ServiceConfig
from corpus_paths import DEV_CORPUS
from oidc_provider import oidc_provider, sign_in_without_browser
from system_tools import needs_chromium

RED_DOT = "What unit state is signalled by a red dot in the output of systemctl status?"  # ch03's
ACCOUNTS = {"alice": {"preferred_username": "alice", "name": "Alice", "groups": ["sre"]},
            "bob": {"preferred_username": "bob", "name": "Bob", "groups": ["hr", "not a group name"]},
            "carol": {"preferred_username": "carol", "name": "Carol", "groups": ["citerag-admins"]}}
SECRET = "a-client-secret-for-the-tests"


@dataclass
class Site:
    server: LiveServer
    issuer: str
    keys: SqliteKeyStore
    ids: dict[str, int]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    home = tmp_path_factory.mktemp("oidc-home")
    port = _free_port()
    clients = [{"client_id": "citerag", "client_secret": SECRET,
                "redirect_uris": [f"http://127.0.0.1:{port}/v1/oidc/callback"]},
               {"client_id": "script", "redirect_uris": ["http://127.0.0.1:9/callback"]}]
    keys = SqliteKeyStore(home)
    admin = keys.create(None, "admin")
    with oidc_provider({"clients": clients, "accounts": ACCOUNTS}) as issuer:
        config = ServiceConfig(oidc=OidcConfig(issuer, "citerag", SECRET), oidc_admin_group="citerag-admins")
        server = LiveServer(home, config, port=port).start()
        try:
            with server.client(admin) as c:
                ids = {}
                for name, groups in (("ch03.en.html", ["sre"]), ("ch04.en.html", [])):
                    sent = c.post("/v1/collections/default/documents", data={"groups": groups},
                                  files=[("files", (name, (DEV_CORPUS / name).read_bytes()))])
                    assert sent.status_code == 202, sent.text
                    ids[name] = sent.json()["documents"][0]["id"]
                assert all(d["status"] == "indexed" for d in wait_settled(c, "default", list(ids.values())))
            yield Site(server, issuer, keys, ids)
        finally:
            server.stop()


def _listed(client: httpx.Client) -> set[str]:
    response = client.get("/v1/collections/default/documents")
    assert response.status_code == 200, response.text
    return {d["name"] for d in response.json()["documents"]}


def _id_token(site: Site, login: str, client: str = "citerag") -> str:
    """An ID token the provider issues to `client` for `login`, through its login and consent pages: what a script
    signed in as a user sends (the `citerag` client's, as the server's own sign-in gets them; `script`: another
    application's)."""
    secret, redirect = (SECRET, f"{site.server.url}/v1/oidc/callback") if client == "citerag" else \
        (None, "http://127.0.0.1:9/callback")
    metadata = httpx.get(f"{site.issuer}/.well-known/openid-configuration").json()
    with OAuth2Client(client, secret, scope="openid profile groups", redirect_uri=redirect,
                      code_challenge_method="S256",
                      token_endpoint_auth_method="client_secret_basic" if secret else "none") as oauth, \
            httpx.Client() as http:
        verifier = "v" * 64
        url, state = oauth.create_authorization_url(metadata["authorization_endpoint"], code_verifier=verifier,
                                                    nonce="n")
        params = sign_in_without_browser(http, url, login, redirect)  # stops at the redirect: the code is ours
        assert params["state"] == state
        token: dict[str, Any] = oauth.fetch_token(metadata["token_endpoint"], code=params["code"],
                                                  code_verifier=verifier)
    return str(token["id_token"])


def test_api_clients_send_the_providers_id_token_and_read_with_its_groups(site: Site) -> None:
    url = site.server.url
    listed = {}
    for login in ("alice", "bob", "carol"):
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {_id_token(site, login)}"}) as c:
            listed[login] = _listed(c)
            hits = c.post("/v1/collections/default/search", json={"query": RED_DOT, "k": 5}).json()["results"]
            listed[login + " search"] = {h["document_name"] for h in hits}
            created = c.post("/v1/collections", json={"name": f"by-{login}"}).status_code
            listed[login + " create"] = created
    assert listed["alice"] == {"ch03.en.html", "ch04.en.html"} and "ch03.en.html" in listed["alice search"]
    assert listed["bob"] == listed["bob search"] == {"ch04.en.html"}
    assert listed["carol"] == {"ch03.en.html", "ch04.en.html"}  # the admin group
    assert (listed["alice create"], listed["bob create"], listed["carol create"]) == (403, 403, 201)
    # Another application's token (another audience), a tampered one, garbage: not a credential here.
    other = _id_token(site, "alice", "script")
    alice = _id_token(site, "alice")
    head, body, signature = alice.split(".")
    tampered = ".".join([head, body, signature[:-4] + ("AAAA" if not signature.endswith("AAAA") else "BBBB")])
    for token in (other, tampered, "not.a.token", "crk_00000000_" + "A" * 32):
        response = httpx.get(f"{url}/v1/collections/default/documents", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 401, token


def test_a_session_from_the_callback_reads_with_the_users_groups_and_ends_with_the_user(site: Site) -> None:
    url = site.server.url
    seen = {}
    for login in ("alice", "bob", "carol"):
        with httpx.Client(base_url=url, timeout=60) as browser_like, httpx.Client() as provider:
            start = browser_like.get("/v1/oidc/login", follow_redirects=False)
            assert start.status_code == 302
            params = sign_in_without_browser(provider, start.headers["location"], login, f"{url}/v1/oidc/callback")
            back = browser_like.get("/v1/oidc/callback", params=params)
            assert back.status_code == 200 and "citerag_session" in browser_like.cookies
            session = browser_like.get("/v1/session").json()
            seen[login] = (session["user"], session["groups"], session["scope"], _listed(browser_like))
            again = browser_like.get("/v1/oidc/callback", params=params)  # a state is used once
            assert again.status_code == 400 and again.json()["field"] == "state"
    assert seen["alice"] == ("alice", ["sre"], "read", {"ch03.en.html", "ch04.en.html"})
    assert seen["bob"] == ("bob", ["hr"], "read", {"ch04.en.html"})  # a claim's unusable group is left out
    assert seen["carol"] == ("carol", ["citerag-admins"], "admin", {"ch03.en.html", "ch04.en.html"})
    assert {u.name: (u.groups, u.origin) for u in site.keys.users()}["bob"] == (("hr",), "oidc")
    # Removed, the user's session ends at once.
    with httpx.Client(base_url=url, timeout=60) as browser_like, httpx.Client() as provider:
        start = browser_like.get("/v1/oidc/login", follow_redirects=False)
        params = sign_in_without_browser(provider, start.headers["location"], "bob", f"{url}/v1/oidc/callback")
        assert browser_like.get("/v1/oidc/callback", params=params).status_code == 200
        assert _listed(browser_like) == {"ch04.en.html"}
        assert site.keys.remove_user("bob")
        assert browser_like.get("/v1/collections/default/documents").status_code == 401
    # A callback from another browser than the one that began the sign-in (login CSRF: an attacker's own callback
    # URL opened in a victim's browser) is refused, and signs nobody in.
    with httpx.Client(base_url=url, timeout=60) as attacker, httpx.Client() as provider, \
            httpx.Client(base_url=url, timeout=60) as victim:
        start = attacker.get("/v1/oidc/login", follow_redirects=False)
        params = sign_in_without_browser(provider, start.headers["location"], "alice", f"{url}/v1/oidc/callback")
        forged = victim.get("/v1/oidc/callback", params=params)
        assert forged.status_code == 400 and forged.json()["field"] == "state"
        assert "citerag_session" not in victim.cookies and victim.get("/v1/session").json()["user"] is None
    # A made-up state, and a provider's refusal, are 400s that name what happened.
    with httpx.Client(base_url=url) as c:
        assert c.get("/v1/oidc/callback", params={"state": "forged", "code": "x"}).status_code == 400
        start = c.get("/v1/oidc/login", follow_redirects=False)
        with httpx.Client() as provider:
            params = sign_in_without_browser(provider, start.headers["location"], "alice",
                                             f"{url}/v1/oidc/callback", cancel=True)
        refused = c.get("/v1/oidc/callback", params=params)
        assert refused.status_code == 400 and "refused the sign-in" in refused.json()["error"]


@needs_chromium
def test_in_chromium_the_page_signs_in_at_the_provider_and_the_groups_decide_what_it_shows(
        site: Site, browser: Browser) -> None:
    shown = {}
    for login in ("alice", "bob"):
        context = browser.new_context(base_url=site.server.url)  # a fresh browser: the provider's pages show
        context.set_default_timeout(20_000)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))  # type: ignore[misc]
        try:
            page.goto("/")
            expect(page.locator("#key-form")).to_be_visible()
            page.click("#oidc-sign-in")
            page.wait_for_url(f"{site.issuer}/**")  # the provider's own login page
            page.fill("input[name=login]", login)
            page.fill("input[name=password]", "any")
            page.click("button[type=submit]")
            page.click("button[type=submit]")  # the consent page's Continue
            page.wait_for_url(f"{site.server.url}/")
            expect(page.locator("#app")).to_be_visible()
            expect(page.locator("#who")).to_contain_text(f"Signed in as {login}")
            expect(page.locator("#documents tbody tr").first).to_be_visible()
            names = set(page.locator("#documents tbody tr").all_inner_texts())
            page.fill("#question", RED_DOT)
            page.click("#ask")
            turn = page.locator("#thread .turn").last
            expect(turn.locator(".answer, .refusal")).to_be_visible()
            shown[login] = (names, turn.locator(".refusal").count() == 1, turn.inner_text())
            cookie = [c for c in context.cookies() if c["name"] == "citerag_session"]
            assert cookie and cookie[0]["httpOnly"] and cookie[0]["sameSite"] == "Strict"
        finally:
            context.close()
        assert not errors, errors
    alice_names, alice_refused, alice_turn = shown["alice"]
    bob_names, bob_refused, bob_turn = shown["bob"]
    assert any("ch03.en.html" in n for n in alice_names) and not alice_refused and "ch03.en.html" in alice_turn
    assert not any("ch03.en.html" in n for n in bob_names) and any("ch04.en.html" in n for n in bob_names)
    assert bob_refused and "ch03.en.html" not in bob_turn
