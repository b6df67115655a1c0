from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from live import LiveServer, live_server, wait_settled

from citerag.service.keys import KeyStore
from corpus_paths import DATA, DEV_CORPUS

# A mixed folder: two dev-set chapters (HTML) and one real sample of each other kind of locator.
MIXED = [DEV_CORPUS / "ch03.en.html", DEV_CORPUS / "ch04.en.html",
         DATA / "samples" / "pdf-2col-paper-jner2016-ccby.pdf",
         DATA / "samples" / "docx-python-docx-paras-tables.docx",
         DATA / "samples" / "xlsx-readxl-datasets.xlsx",
         DATA / "samples" / "vtt-youtube-dl.vtt"]
# The second team's collection: a chapter the first one does not have.
OTHER = [DEV_CORPUS / "ch08.en.html"]


@dataclass
class Deployment:
    """One server with keys required, two collections, and a key per role."""

    server: LiveServer
    admin: str  # server admin: every collection
    team_a: str  # write on "default" (the mixed folder)
    team_b: str  # write on "other" (one chapter)
    reader_a: str  # read on "default"
    ids: dict[str, int]  # file name -> document id in "default"


@pytest.fixture(scope="session")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("service-home")
    keys = KeyStore(home)
    admin = keys.create(None, "admin")
    with live_server(home) as server:
        with server.client(admin) as c:
            assert c.post("/v1/collections", json={"name": "other"}).status_code == 201
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
