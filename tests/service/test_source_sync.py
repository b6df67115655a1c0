"""Issue 29's end-to-end check: one source of each kind (a folder, a Git repository behind a real `git daemon`, a
website on a real HTTP server, all on loopback) synced into a running server, then changed upstream (a document
changed, one added, one deleted per source) and synced again. What was re-fetched and re-embedded is counted from
the store (chunk ids are never reused, so a re-embedded document has new ones) and the origin's own logs, never
from citerag's logs; questions cite the new text; removed documents are gone from search, answers, files and the
answer cache; an upload made by hand is untouched. The documents are real text: XQuAD articles (CC-BY-SA 4.0, see
eval/xquad-en/LICENSE-CC-BY-SA-4.0.txt) and Debian Reference pages (eval/debian-reference/corpus/LICENSE)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from live import LiveServer, live_server, wait_settled

from citerag.service.state import ServiceConfig
from corpus_paths import DEV_CORPUS, ROOT
from system_tools import require_git
from upstreams import Served, Site, commit_all, git, page, start_daemon

XQUAD = ROOT / "eval" / "xquad-en" / "corpus"
OXYGEN = "Who produced enough liquid oxygen to study in 1891?"  # answered by Oxygen.txt alone
FACTS = {  # (source, document) -> a sentence no corpus holds, and the question it answers
    "folder": ("The harbour master of Vellmora Island is Ingrid Thalassa.",
               "Who is the harbour master of Vellmora Island?"),
    "git": ("The Quorvath glacier retreated by eleven kilometres in the year 2031.",
            "How far did the Quorvath glacier retreat?"),
    "web": ("The Zentrikon relay station was decommissioned after the Brellin flood.",
            "When was the Zentrikon relay station decommissioned?"),
}
NEW = {"folder": ("The Ossory lantern festival is held every ninth of Brumaire.",
                  "When is the Ossory lantern festival held?"),
       "git": ("Tamsk pottery is fired in kilns built from Varhold clay.", "What are Tamsk pottery kilns built from?"),
       "web": ("The Pelloran observatory measures Kettering drift every night.",
               "What does the Pelloran observatory measure?")}


@dataclass
class Origins:
    folder: Path
    repo: Served
    site: Site
    web_root: Path


@pytest.fixture()
def origins(tmp_path: Path) -> Iterator[Origins]:
    require_git()
    base = tmp_path / "origins"
    folder = base / "share"
    folder.mkdir(parents=True)
    for name in ("Kenya", "Warsaw", "Oxygen"):
        shutil.copy(XQUAD / f"{name}.txt", folder / f"{name}.txt")
    repo = base / "git" / "handbook"
    (repo / "docs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for name in ("Geology", "Pharmacy", "Normans"):
        shutil.copy(XQUAD / f"{name}.txt", repo / "docs" / f"{name}.md")
    (repo / "setup.py").write_text("print('not a document')\n")
    commit_all(repo, "first")
    served = start_daemon(base / "git", repo, base / "daemon.log")
    web = base / "site"
    (web / "docs").mkdir(parents=True)
    (web / "robots.txt").write_text("User-agent: *\nDisallow: /docs/drafts/\n")
    for name in ("apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, web / "docs" / name)
    (web / "docs" / "relay.html").write_text(page("Relay stations", []).replace(
        "</ul>", "</ul><p>Relay stations carry signals between valleys. They are inspected every spring.</p>"))
    (web / "docs" / "index.html").write_text(page("Handbook", ["apa.en.html", "pr01.en.html", "relay.html",
                                                               "drafts/wip.html"]))
    site = Site(web)
    try:
        yield Origins(folder, served, site, web)
    finally:
        served.stop()
        site.server.shutdown()
        site.server.server_close()


def _chunk_ids(live: LiveServer) -> dict[str, set[int]]:
    """Each document's stored chunk ids by its key, read from the store."""
    collection = live.service.app.collection("default")
    snap = collection.store.snapshot(collection.settings.embedding_model)
    ids: dict[str, set[int]] = {}
    for c in snap.chunks:
        ids.setdefault(snap.documents[c.document_id].source_path, set()).add(c.id)
    return ids


def _sync(c: httpx.Client, name: str) -> dict[str, Any]:
    response = c.post(f"/v1/collections/default/sources/{name}/sync", params={"wait": "true"})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["error"] is None and report["complete"], report
    return dict(report)


def _ask(c: httpx.Client, question: str) -> dict[str, Any]:
    response = c.post("/v1/collections/default/ask", json={"question": question})
    assert response.status_code == 200, response.text
    return dict(response.json())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_three_sources_sync_changes_and_deletions(origins: Origins, tmp_path: Path, backend: str,
                                                  request: pytest.FixtureRequest) -> None:
    o = origins
    store = {"store_url": request.getfixturevalue("pg_url")} if backend == "postgres" else {}
    with live_server(tmp_path / "home", ServiceConfig(keys_required=False), source_roots=[o.folder.parent],
                     **store) as live, live.client() as c:
        # An upload by hand first: no source's sync may touch it.
        hand = c.post("/v1/collections/default/documents",
                      files=[("files", ("Apollo.txt", (XQUAD / "Apollo_program.txt").read_bytes()))])
        assert hand.status_code == 202, hand.text
        hand_id = hand.json()["documents"][0]["id"]
        wait_settled(c, "default", [hand_id])
        for body in ({"name": "share", "kind": "folder", "location": str(o.folder)},
                     {"name": "handbook", "kind": "git", "location": o.repo.url, "globs": ["docs/**/*.md"],
                      "link": "https://forge.example/handbook/blob/{commit}/{path}"},
                     {"name": "site", "kind": "web", "location": o.site.url("/docs/index.html"), "rate": 50}):
            response = c.post("/v1/collections/default/sources", json=body)
            assert response.status_code == 201, response.text
        first = {n: _sync(c, n) for n in ("share", "handbook", "site")}
        assert [first[n]["added"] for n in ("share", "handbook", "site")] == [3, 3, 4]  # index, apa, pr01, relay
        assert all(r["fetched"] == r["added"] and r["removed"] == r["failed"] == 0 for r in first.values())
        assert "/docs/drafts/wip.html" not in o.site.paths()  # robots.txt said no
        listed = c.get("/v1/collections/default/sources").json()["sources"]
        assert {s["name"]: s["documents"] for s in listed} == {"share": 3, "handbook": 3, "site": 4}
        assert next(s for s in listed if s["name"] == "handbook")["commit"] == git(o.repo.repo, "rev-parse", "HEAD")

        # A question about a document that will be deleted, answered (and cached) before it goes.
        doomed = {"share": "source:share:Oxygen.txt", "handbook": "source:handbook:docs/Normans.md",
                  "site": f"source:site:{o.site.url('/docs/apa.en.html')}"}
        before = _chunk_ids(live)
        oxygen = _ask(c, OXYGEN)
        assert any(x["document_name"] == "Oxygen.txt" for x in oxygen["citations"]), oxygen

        # Nothing changed upstream: nothing fetched, nothing re-embedded, every page answered 304.
        mark = len(o.site.log)
        again = {n: _sync(c, n) for n in ("share", "handbook", "site")}
        assert all(r["fetched"] == r["added"] == r["changed"] == r["removed"] == 0 for r in again.values()), again
        assert o.site.paths(mark, status=200) == ["/robots.txt"]
        assert _chunk_ids(live) == before

        # Upstream: one document changed, one added, one deleted, in each origin.
        with (o.folder / "Kenya.txt").open("a") as f:
            f.write("\n\n" + FACTS["folder"][0] + "\n")
        (o.folder / "Ossory.txt").write_text(NEW["folder"][0] + " Lanterns are floated on the river.\n")
        (o.folder / "Oxygen.txt").unlink()
        with (o.repo.repo / "docs" / "Geology.md").open("a") as f:
            f.write("\n\n" + FACTS["git"][0] + "\n")
        (o.repo.repo / "docs" / "Tamsk.md").write_text("# Tamsk\n\n" + NEW["git"][0] + "\n")
        (o.repo.repo / "docs" / "Normans.md").unlink()
        commit_all(o.repo.repo, "change, add, delete")
        relay = o.web_root / "docs" / "relay.html"
        relay.write_text(relay.read_text().replace("</p>", " " + FACTS["web"][0] + "</p>"))
        (o.web_root / "docs" / "pelloran.html").write_text(page("Pelloran", []).replace(
            "</ul>", f"</ul><p>{NEW['web'][0]}</p>"))
        (o.web_root / "docs" / "index.html").write_text(page("Handbook", ["pr01.en.html", "relay.html",
                                                                          "pelloran.html", "drafts/wip.html"]))
        (o.web_root / "docs" / "apa.en.html").unlink()
        mark = len(o.site.log)
        third = {n: _sync(c, n) for n in ("share", "handbook", "site")}
        changed = {"share": {"source:share:Kenya.txt"}, "handbook": {"source:handbook:docs/Geology.md"},
                   "site": {f"source:site:{o.site.url(p)}" for p in ("/docs/relay.html", "/docs/index.html")}}
        added = {"share": {"source:share:Ossory.txt"}, "handbook": {"source:handbook:docs/Tamsk.md"},
                 "site": {f"source:site:{o.site.url('/docs/pelloran.html')}"}}
        for n, r in third.items():
            assert (r["changed"], r["added"], r["removed"], r["failed"]) == (len(changed[n]), 1, 1, 0), (n, r)
            assert r["fetched"] == len(changed[n]) + 1, (n, r)
        assert sorted(o.site.paths(mark, status=200)) == sorted(
            ["/robots.txt", "/docs/index.html", "/docs/relay.html", "/docs/pelloran.html"])
        after = _chunk_ids(live)
        re_embedded = {k for k in after if after[k] != before.get(k)}
        assert re_embedded == set().union(*changed.values(), *added.values())
        assert set(before) - set(after) == set(doomed.values())
        assert after["upload:Apollo.txt"] == before["upload:Apollo.txt"]

        # Questions cite the new text, in the changed and the added documents alike.
        for fact, question in [*FACTS.values(), *NEW.values()]:
            answer = _ask(c, question)
            assert not answer["refusal"]["refused"], (question, answer)
            assert any(fact in x["quote"] for x in answer["citations"]), (question, answer["citations"])
        # A Git file's citation opens its forge page at the commit that holds the new sentence.
        commit = git(o.repo.repo, "rev-parse", "HEAD")
        geology = [x for x in _ask(c, FACTS["git"][1])["citations"] if FACTS["git"][0] in x["quote"]]
        assert geology and geology[0]["live_href"] == f"https://forge.example/handbook/blob/{commit}/docs/Geology.md"
        relay_answer = _ask(c, FACTS["web"][1])
        live_hrefs = [x.get("live_href", "") for x in relay_answer["citations"]]
        assert any(h.startswith(o.site.url("/docs/relay.html") + "#:~:text=") for h in live_hrefs), live_hrefs

        # The removed documents are gone from search, answers (the cached answer included) and files.
        docs = c.get("/v1/collections/default/documents").json()["documents"]
        names = {d["name"] for d in docs}
        assert "Oxygen.txt" not in names and "Normans.md" not in names and "apa.en.html" not in names
        assert "Apollo.txt" in names
        again_oxygen = _ask(c, OXYGEN)
        assert all(x["document_name"] != "Oxygen.txt" for x in again_oxygen["citations"])
        for x in oxygen["citations"]:
            if x["document_name"] == "Oxygen.txt":
                assert c.get(x["href"].split("#")[0]).status_code == 404
                assert c.get(f"/v1/collections/default/documents/{x['document_id']}").status_code == 404
        hits = c.post("/v1/collections/default/search", json={"query": "Norman conquest of England"}).json()
        assert all(h["document_name"] != "Normans.md" for h in hits["results"])

        # Removing a source removes its documents and nothing else.
        removed = c.delete("/v1/collections/default/sources/share")
        assert removed.json() == {"source": "share", "removed_documents": 3}
        names = {d["name"] for d in c.get("/v1/collections/default/documents").json()["documents"]}
        assert "Kenya.txt" not in names and {"Apollo.txt", "Geology.md", "relay.html"} <= names


def test_bad_source_requests_are_4xx_naming_the_field(tmp_path: Path) -> None:
    allowed = tmp_path / "shares"
    (allowed / "docs").mkdir(parents=True)
    with live_server(tmp_path / "home", ServiceConfig(keys_required=False), source_roots=[allowed]) as live, \
            live.client() as c:
        url = "/v1/collections/default/sources"
        cases = [({"name": "x", "kind": "ftp", "location": "/srv"}, 422, "kind"),
                 ({"name": "Bad Name", "kind": "web", "location": "http://a/"}, 422, "name"),
                 ({"name": "x", "kind": "web", "location": "ftp://a/"}, 422, "location"),
                 ({"name": "x", "kind": "web", "location": "http://a/", "rate": 0}, 422, "rate"),
                 ({"name": "x", "kind": "web", "location": "http://a/", "colour": "red"}, 422, "colour"),
                 ({"name": "x", "kind": "folder", "location": str(tmp_path)}, 403, "location"),  # outside the roots
                 ({"name": "x", "kind": "folder", "location": str(allowed / ".." / "home")}, 403, "location"),
                 ({"name": "x", "kind": "git", "location": f"file://{tmp_path}"}, 403, "location"),
                 ({"name": "x", "kind": "git", "location": "/etc"}, 403, "location"),
                 ({"name": "x", "kind": "web", "location": "http://a/", "interval_s": 60, "cron": "0 3 * * *"}, 422,
                  "cron"),
                 ({"name": "x", "kind": "web", "location": "http://a/", "cron": "at noon"}, 422, "cron")]
        for body, status, field in cases:
            response = c.post(url, json=body)
            assert response.status_code == status, (body, response.text)
            assert response.json()["field"] == field, (body, response.json())
        assert c.post(url, json={"name": "docs", "kind": "folder", "location": str(allowed / "docs")}).status_code \
            == 201
        duplicate = c.post(url, json={"name": "docs", "kind": "web", "location": "http://a/"})
        assert duplicate.status_code == 409 and "exists" in duplicate.json()["error"]
        for method, path in (("GET", "/nope"), ("POST", "/nope/sync"), ("DELETE", "/nope")):
            response = c.request(method, url + path)
            assert response.status_code == 404 and "no source 'nope'" in response.json()["error"], response.text
        # Two syncs of one source never run at once: a held lease is a 409 naming its holder.
        store = live.service.app.collection("default").store
        assert store.lease_source("docs", "elsewhere:1:1", 60) is None
        busy = c.post(url + "/docs/sync", params={"wait": "true"})
        assert busy.status_code == 409 and "elsewhere:1:1" in busy.json()["error"]
        assert c.delete(url + "/docs").status_code == 409
        store.lease_source("docs", "elsewhere:1:1", 0)
        assert c.post(url + "/docs/sync", params={"wait": "true"}).json()["complete"] is True
        assert c.delete(url + "/docs").json() == {"source": "docs", "removed_documents": 0}
