from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live import live_server, wait_settled
from playwright.sync_api import Browser, sync_playwright
from service_fixtures import MIXED, OTHER, Deployment

from citerag.app.home import open_key_store
from citerag.keystore.base import KeyStore
from citerag.keystore.sqlite import SqliteKeyStore
from citerag.settings import Settings
from system_tools import chromium_path


def _deploy(home: Path, keys: KeyStore, **settings: Any) -> Iterator[Deployment]:
    """A server with keys required: "default" holds the mixed folder, "other" one chapter; a key per role."""
    admin = keys.create(None, "admin")
    with live_server(home, **settings) as server:
        with server.client(admin) as c:
            assert c.post("/v1/collections", json={"name": "other"}).status_code == 201
            # A source of default's (a website on a closed port, never synced) for the probes of its routes.
            assert c.post("/v1/collections/default/sources", json={
                "name": "handbook", "kind": "web", "location": "http://127.0.0.1:9/handbook/"}).status_code == 201
        team_a, reader_a = keys.create("default", "write"), keys.create("default", "read")
        team_b = keys.create("other", "write")
        ids: dict[str, int] = {}
        with server.client(team_a) as c:
            files = [("files", (p.name, p.read_bytes())) for p in MIXED]
            response = c.post("/v1/collections/default/documents", files=files)
            assert response.status_code == 202, response.text
            ids = {d["name"]: d["id"] for d in response.json()["documents"]}
            wait_settled(c, "default", list(ids.values()))
        with server.client(team_b) as c:
            response = c.post("/v1/collections/other/documents",
                              files=[("files", (p.name, p.read_bytes())) for p in OTHER])
            wait_settled(c, "other", [d["id"] for d in response.json()["documents"]])
        yield Deployment(server, admin, team_a, team_b, reader_a, ids)


@pytest.fixture(scope="session")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("service-home")
    yield from _deploy(home, SqliteKeyStore(home))


@pytest.fixture(scope="session")
def pg_deployment(tmp_path_factory: pytest.TempPathFactory, pg_server: Any) -> Iterator[Deployment]:
    """The same deployment on PostgreSQL: its catalog, chunks, indexes, originals and keys in one database."""
    home = tmp_path_factory.mktemp("service-home-pg")
    url = str(pg_server.create_database("service_deployment"))
    keys = open_key_store(Settings(index_dir=home, store_url=url))
    try:
        yield from _deploy(home, keys, store_url=url)
    finally:
        keys.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium under Playwright (no browser download); tests that use it are marked needs_chromium."""
    with sync_playwright() as p:
        # Playwright starts Chromium without its sandbox by default (needed as root in a container).
        launched = p.chromium.launch(executable_path=chromium_path())
        try:
            yield launched
        finally:
            launched.close()
