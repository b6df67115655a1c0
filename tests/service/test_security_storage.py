"""Issue 25's storage holes, reproduced over a real socket: a collection named `..` or `.` that wrote the home's
settings although the request failed, document ids reused after a delete, and an original left on disk when a
replacement was PUT just before the DELETE. The encoder is the deterministic HashEncoder (tests/fakes.py): these
are about what is stored, not about retrieval."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from live import LiveServer, live_server, wait_settled

from citerag.keystore.sqlite import SqliteKeyStore
from citerag.service.state import ServiceConfig
from corpus_paths import DATA
from fakes import HashEncoder

PDF = DATA / "samples" / "pdf-2col-paper-jner2016-ccby.pdf"


class GatedEncoder(HashEncoder):
    """HashEncoder that, while `closed`, holds an indexing job inside its encoding (the job holds the collection's
    write lock there), so that a test can place a request exactly before or during a job."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.open.set()
        self.entered = threading.Event()

    def close_gate(self) -> None:
        self.entered.clear()
        self.open.clear()

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        if not self.open.is_set():
            self.entered.set()
            assert self.open.wait(60)
        return super().encode(texts, progress)


@pytest.fixture()
def running(tmp_path: Path) -> Iterator[tuple[LiveServer, str]]:
    home = tmp_path / "home"
    admin = SqliteKeyStore(home).create(None, "admin")
    with live_server(home, ServiceConfig(), embedding_model="hash-64") as server:
        server.encoder = GatedEncoder()  # type: ignore[attr-defined]
        server.service.app.register_encoder(server.encoder)  # type: ignore[attr-defined]
        yield server, admin


def _settings_files(home: Path) -> dict[str, bytes]:
    """Every config.toml under the home (what marks and configures a collection), and every folder."""
    return {str(p.relative_to(home)): p.read_bytes() if p.is_file() else b"<folder>" for p in sorted(home.rglob("*"))
            if p.name == "config.toml" or (p.is_dir() and p.name not in ("search", "jobs", "files"))
            and "search" not in p.relative_to(home).parts}


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "team.", "team\n"])
def test_a_collection_named_like_a_path_is_refused_and_writes_no_file(running: tuple[LiveServer, str],
                                                                      name: str) -> None:
    server, admin = running
    (server.home / "config.toml").write_text("threshold = 0.5\n", encoding="utf-8")
    before = _settings_files(server.home)
    with server.client(admin) as c:
        answer = c.post("/v1/collections", json={"name": name, "settings": {"threshold": 1.9}})
        assert answer.status_code == 422 and answer.json()["field"] == "name", answer.text
        assert [n["name"] for n in c.get("/v1/collections").json()["collections"]] == ["default"]
    assert _settings_files(server.home) == before  # HOME/config.toml untouched, no HOME/collections/config.toml
    assert not (server.home / "collections" / "config.toml").exists()


def test_after_a_refused_name_the_home_collection_keeps_its_name_and_threshold(tmp_path: Path) -> None:
    home = tmp_path / "home"
    admin = SqliteKeyStore(home).create(None, "admin")
    for _ in range(2):  # the second server is the restart after which the hole showed
        with live_server(home, ServiceConfig(), embedding_model="hash-64") as server, server.client(admin) as c:
            assert c.post("/v1/collections", json={"name": "..", "settings": {"threshold": 1.9}}).status_code == 422
            listed = c.get("/v1/collections").json()["collections"]
            assert [(n["name"], n["settings"]["threshold"]) for n in listed] == \
                [("default", server.service.app.collection().settings.threshold)]
            assert listed[0]["settings"]["threshold"] != 1.9
    assert not (home / "config.toml").exists()


def test_a_collection_path_that_a_path_could_read_is_a_4xx(running: tuple[LiveServer, str]) -> None:
    server, admin = running
    with server.client(admin) as c:
        for path in ("/v1/collections/.hidden", "/v1/collections/%2E%2E/documents", "/v1/collections/team."):
            assert c.get(path).status_code in (404, 422), path
        assert c.delete("/v1/collections/.hidden").status_code in (404, 422)


def test_a_deleted_documents_id_is_never_given_again(running: tuple[LiveServer, str]) -> None:
    server, admin = running
    with server.client(admin) as c:
        ids = []
        for n in range(3):
            up = c.post("/v1/collections/default/documents", files=[("files", (f"x{n}.md", b"# X\n\nOne %d.\n" % n))])
            ids.append(up.json()["documents"][0]["id"])
        wait_settled(c, "default", ids)
        assert c.delete(f"/v1/collections/default/documents/{ids[-1]}").status_code == 204
        y = c.post("/v1/collections/default/documents", files=[("files", ("y.md", b"# Y\n\nAnother text.\n"))])
        new = y.json()["documents"][0]["id"]
        assert new > ids[-1]
        assert c.get(f"/v1/collections/default/documents/{ids[-1]}").status_code == 404  # X's links open nothing
        wait_settled(c, "default", [new])


def _stored(server: LiveServer) -> set[str]:
    folder = server.home / "files"
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def _wait_idle(c: httpx.Client) -> None:
    """Until the queue has nothing waiting or running for the collection."""
    deadline = time.monotonic() + 60
    while any(d["job"] for d in c.get("/v1/collections/default/documents").json()["documents"]):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_no_original_stays_on_disk_after_delete_whatever_the_order(running: tuple[LiveServer, str]) -> None:
    server, admin = running
    base, url = "/v1/collections/default/documents", "/v1/collections/default/documents/{}"
    keep = b"# Keep\n\nThe bystander stays.\n"
    with server.client(admin) as c:
        kept = c.post(base, files=[("files", ("keep.md", keep))]).json()["documents"][0]["id"]
        wait_settled(c, "default", [kept])
        orders = ["put, delete at once", "put, settle, delete", "failed put, delete", "failed put, retry, delete",
                  "put twice, delete at once"]
        for n, order in enumerate(orders):
            pdf = "failed" in order  # a PDF whose replacement cannot be read: the job fails, the old one is served
            name = f"paper{n}.pdf" if pdf else f"doc{n}.md"
            first = PDF.read_bytes() if pdf else b"# Doc\n\nVersion one %d.\n" % n
            doc = c.post(base, files=[("files", (name, first))]).json()["documents"][0]["id"]
            wait_settled(c, "default", [doc])
            second = b"%PDF-1.4 not really" if pdf else b"# Doc\n\nVersion two %d.\n" % n
            assert c.put(url.format(doc), files={"file": (name, second)}).status_code == 202
            if order == "put twice, delete at once":
                assert c.put(url.format(doc), files={"file": (name, b"# Doc\n\nThree %d.\n" % n)}).status_code == 202
            if "settle" in order or "failed" in order:
                (settled,) = wait_settled(c, "default", [doc])
                assert bool(settled["error"]) == pdf, settled
            if "retry" in order:
                assert c.post(url.format(doc) + "/retry").status_code == 202
            assert c.delete(url.format(doc)).status_code == 204, order
            _wait_idle(c)
            assert _stored(server) == {hashlib.sha256(keep).hexdigest()}, order
        assert c.get(url.format(kept) + "/file").content == keep


@pytest.mark.parametrize("order", ["before the job ran", "during indexing"])
def test_a_delete_placed_exactly_after_a_put_leaves_no_original(running: tuple[LiveServer, str], order: str) -> None:
    server, admin = running
    gate: GatedEncoder = server.encoder  # type: ignore[attr-defined]
    url = "/v1/collections/default/documents/{}"
    with server.client(admin) as c:
        doc = c.post("/v1/collections/default/documents", files=[("files", ("doc.md", b"# Doc\n\nOne.\n"))])
        doc_id = doc.json()["documents"][0]["id"]
        wait_settled(c, "default", [doc_id])
        gate.close_gate()
        if order == "before the job ran":  # another document's job holds the queue: the replacement waits behind it
            c.post("/v1/collections/default/documents", files=[("files", ("blocker.md", b"# Blocker\n\nWait.\n"))])
            assert gate.entered.wait(30)
        assert c.put(url.format(doc_id), files={"file": ("doc.md", b"# Doc\n\nTwo.\n")}).status_code == 202
        if order == "during indexing":
            assert gate.entered.wait(30)
        done: list[int] = []

        def delete() -> None:
            with server.client(admin) as other:
                done.append(other.delete(url.format(doc_id)).status_code)

        deleting = threading.Thread(target=delete)
        deleting.start()  # it waits for the running job on the collection's write lock
        time.sleep(0.3)
        gate.open.set()
        deleting.join(60)
        assert done == [204]
        _wait_idle(c)
        remaining = {d["sha256"] for d in c.get("/v1/collections/default/documents").json()["documents"]}
        assert _stored(server) == remaining
