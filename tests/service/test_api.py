"""The API over a real socket: a mixed folder uploaded and indexed, questions answered with citations that open
the source at the quote, replacement and deletion seen by search and answers at once, errors as 4xx."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from live import live_server, wait_settled
from service_fixtures import MIXED, Deployment

from citerag.errors import CiteragError
from citerag.service.state import ServiceConfig
from citerag.settings import DEFAULT_ENCODER
from corpus_paths import DEV_SET

QUESTIONS = [json.loads(line) for line in (DEV_SET / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
IN_MIXED = [q for q in QUESTIONS if q["source"] in {p.name for p in MIXED}]
LOCATOR_TYPE = {".pdf": "page", ".xlsx": "cell", ".vtt": "time", ".docx": "char", ".html": "char"}


def collapse(text: str) -> str:
    return " ".join(text.split())


def sse(body: str) -> list[tuple[str, dict]]:
    events = []
    for block in body.replace("\r\n", "\n").split("\n\n"):
        lines = [line for line in block.split("\n") if line and not line.startswith(":")]
        name = next((line[6:].strip() for line in lines if line.startswith("event:")), "message")
        data = "\n".join(line[5:].strip() for line in lines if line.startswith("data:"))
        if data:
            events.append((name, json.loads(data)))
    return events


def check_citation_opens_at_quote(c: httpx.Client, citation: dict) -> None:
    """The citation's text view holds exactly the quote at its range; its href opens the original."""
    doc_url = citation["text_href"].split("/view#")[0]
    text = c.get(f"{doc_url}/text").text
    assert text[citation["start"]:citation["end"]] == citation["quote"]
    assert citation["text_href"].endswith(f"/view#char={citation['start']},{citation['end']}")
    view = c.get(citation["text_href"].split("#")[0])
    assert view.status_code == 200 and "view.js" in view.text
    opened = c.get(citation["href"].split("#")[0])
    assert opened.status_code == 200
    doc = c.get(doc_url).json()
    original = c.get(doc["file_href"])
    assert hashlib.sha256(original.content).hexdigest() == doc["sha256"]
    if "/file" in citation["href"]:
        assert opened.content == original.content


def test_mixed_folder_is_indexed_with_stamps(deployment: Deployment) -> None:
    with deployment.server.client(deployment.team_a) as c:
        docs = {d["name"]: d for d in c.get("/v1/collections/default/documents").json()["documents"]}
    for path in MIXED:
        doc = docs[path.name]
        assert doc["status"] == "indexed", doc
        assert doc["chunk_count"] > 0 and doc["stamps"]["embedding_model"] == DEFAULT_ENCODER
        assert doc["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_dev_set_question_is_answered_and_every_citation_opens_at_its_quote(deployment: Deployment) -> None:
    question = next(q for q in QUESTIONS if q["id"] == "dr-12-doc")  # the red dot of `systemctl status`
    with deployment.server.client(deployment.reader_a) as c:
        answer = c.post("/v1/collections/default/ask", json={"question": question["query"]}).json()
        assert not answer["refused"] and answer["refusal"]["best_distance"] < answer["refusal"]["threshold"]
        assert any(collapse(question["needle"]) in collapse(cit["quote"]) for cit in answer["citations"])
        for marker in answer["markers"]:  # each [n] sits where the server says, and names a listed source
            group = answer["answer"][marker["start"]:marker["end"]]
            assert re.fullmatch(r"\[[\d, ]+\]", group) and str(marker["index"]) in group
            assert 1 <= marker["index"] <= len(answer["citations"])
        assert answer["markers"]
        for citation in answer["citations"]:
            assert citation["locator"] == {"type": "char", "start": citation["start"], "end": citation["end"]}
            # An HTML source opens as the original page with a text fragment of the quote's first and last words.
            assert "/file#:~:text=" in citation["href"]
            check_citation_opens_at_quote(c, citation)


@pytest.mark.parametrize("question", IN_MIXED, ids=[q["id"] for q in IN_MIXED])
def test_answers_cite_only_what_the_text_view_shows(deployment: Deployment, question: dict) -> None:
    with deployment.server.client(deployment.reader_a) as c:
        answer = c.post("/v1/collections/default/ask", json={"question": question["query"]}).json()
        texts: dict[int, str] = {}
        for citation in answer["citations"]:
            doc = citation["document_id"]
            texts.setdefault(doc, c.get(f"/v1/collections/default/documents/{doc}/text").text)
            assert texts[doc][citation["start"]:citation["end"]] == citation["quote"]
        assert answer["refused"] == (not answer["citations"])


@pytest.mark.parametrize("path", [p for p in MIXED if p.suffix != ".html"], ids=lambda p: p.suffix)
def test_each_format_gets_its_typed_locator_and_href(deployment: Deployment, path: Path) -> None:
    doc_id = deployment.ids[path.name]
    with deployment.server.client(deployment.reader_a) as c:
        text = c.get(f"/v1/collections/default/documents/{doc_id}/text").text
        # A distinctive line of the document itself, searched for by its words.
        line = max((ln for ln in text.splitlines() if len(ln) < 200), key=lambda ln: len(set(ln.split())))
        results = c.post("/v1/collections/default/search",
                         json={"query": line, "mode": "bm25", "k": 3}).json()["results"]
        top = results[0]
        assert top["document_id"] == doc_id, (line, top["document_name"])
        assert top["locator"]["type"] == LOCATOR_TYPE[path.suffix]
        if path.suffix == ".pdf":
            assert top["href"].endswith(f"/file#page={top['locator']['page']}")
            assert c.get(top["href"].split("#")[0]).headers["content-type"] == "application/pdf"
        else:
            assert top["href"] == top["text_href"]
        check_citation_opens_at_quote(c, top)


def test_streamed_answer_has_named_events_and_the_same_citations(deployment: Deployment) -> None:
    question = next(q for q in QUESTIONS if q["id"] == "dr-12-ticket")
    with deployment.server.client(deployment.reader_a) as c:
        plain = c.post("/v1/collections/default/ask", json={"question": question["query"]}).json()
        streamed = c.post("/v1/collections/default/ask", json={"question": question["query"], "stream": True})
        assert streamed.headers["content-type"].startswith("text/event-stream")
        events = sse(streamed.text)
        names = [name for name, _ in events]
        assert names[0] == "retrieval" and names[-2:] == ["final", "done"] and "delta" in names
        cited = [data for name, data in events if name == "citation"]
        final = events[-2][1]
        assert cited == final["citations"] == plain["citations"]
        assert final["answer"] == plain["answer"]
        refused = sse(c.post("/v1/collections/default/ask",
                             json={"question": "How do I bake sourdough bread?", "stream": True}).text)
        assert [name for name, _ in refused] == ["retrieval", "refusal", "final", "done"]
        assert refused[1][1]["refused"] is True and refused[1][1]["threshold"] == plain["refusal"]["threshold"]


def test_replaced_document_is_cited_in_its_new_version_and_deleted_one_is_gone(deployment: Deployment) -> None:
    old = "# Flux notes\n\nThe quartz flux capacitor of the citerag test rig needs exactly 42 volts to start.\n"
    new = "# Flux notes\n\nThe quartz flux capacitor of the citerag test rig needs exactly 7 volts to start.\n"
    question = {"question": "How many volts does the quartz flux capacitor of the test rig need?"}
    with deployment.server.client(deployment.team_a) as c:
        up = c.post("/v1/collections/default/documents", files=[("files", ("flux.md", old.encode()))])
        doc_id = up.json()["documents"][0]["id"]
        wait_settled(c, "default", [doc_id])
        again = c.post("/v1/collections/default/documents", files=[("files", ("flux.md", old.encode()))])
        assert again.status_code == 202 and again.json()["documents"][0] | {"existed": True} == \
            again.json()["documents"][0] and again.json()["documents"][0]["id"] == doc_id
        clash = c.post("/v1/collections/default/documents", files=[("files", ("flux.md", new.encode()))])
        assert clash.status_code == 409 and clash.json()["field"] == "files"

        first = c.post("/v1/collections/default/ask", json=question).json()
        assert "42 volts" in first["citations"][0]["quote"]
        replaced = c.put(f"/v1/collections/default/documents/{doc_id}", files={"file": ("flux.md", new.encode())})
        assert replaced.status_code == 202
        (doc,) = wait_settled(c, "default", [doc_id])
        assert doc["sha256"] == hashlib.sha256(new.encode()).hexdigest() and doc["status"] == "indexed"
        second = c.post("/v1/collections/default/ask", json=question).json()
        assert "7 volts" in second["citations"][0]["quote"]
        hits = c.post("/v1/collections/default/search", json={"query": "quartz flux capacitor volts", "k": 50})
        assert not any("42 volts" in r["quote"] for r in hits.json()["results"])

        assert c.delete(f"/v1/collections/default/documents/{doc_id}").status_code == 204
        assert c.get(f"/v1/collections/default/documents/{doc_id}").status_code == 404
        hits = c.post("/v1/collections/default/search", json={"query": "quartz flux capacitor volts", "k": 50})
        assert all(r["document_id"] != doc_id for r in hits.json()["results"])
        gone = c.post("/v1/collections/default/ask", json=question).json()
        assert all(cit["document_id"] != doc_id for cit in gone["citations"])
        assert c.get(f"/v1/collections/default/documents/{doc_id}/file").status_code == 404


def test_failed_document_keeps_its_reason_and_retry_runs_again(deployment: Deployment) -> None:
    with deployment.server.client(deployment.team_a) as c:
        up = c.post("/v1/collections/default/documents", files=[("files", ("broken.pdf", b"%PDF-1.4 not really"))])
        doc_id = up.json()["documents"][0]["id"]
        (doc,) = wait_settled(c, "default", [doc_id])
        assert doc["status"] == "failed" and doc["error"]
        retried = c.post(f"/v1/collections/default/documents/{doc_id}/retry")
        assert retried.status_code == 202
        (after,) = wait_settled(c, "default", [doc_id])
        assert after["status"] == "failed" and after["error"] == doc["error"]
        events = sse(c.get("/v1/collections/default/documents/events", params={"ids": str(doc_id)}).text)
        assert [name for name, _ in events] == ["status", "done"] and events[0][1]["status"] == "failed"
        assert c.delete(f"/v1/collections/default/documents/{doc_id}").status_code == 204


@pytest.mark.parametrize(("method", "path", "kwargs", "field"), [
    ("post", "/v1/collections/default/ask", {"json": {"question": 5}}, "question"),
    ("post", "/v1/collections/default/ask", {"json": {"question": "x", "k": 0}}, "k"),
    ("post", "/v1/collections/default/ask", {"json": {"question": "x", "treshold": 0.5}}, "treshold"),
    ("post", "/v1/collections/default/ask", {"json": {"question": "   "}}, "question"),
    ("post", "/v1/collections/default/ask", {"content": b"{not json", "headers": {"content-type": "application/json"}},
     "body"),  # the body as a whole (pydantic's loc is a character offset, never a field)
    ("post", "/v1/collections/default/ask", {"json": {"question": "x", "stream": "yes"}}, "stream"),
    ("post", "/v1/collections/default/search", {"json": {}}, "query"),
    ("post", "/v1/collections/default/documents", {"data": {"x": "1"}}, "files"),
    ("post", "/v1/collections/default/documents", {"files": [("files", ("", b"x"))]}, "files"),
    ("get", "/v1/collections/default/documents/0", {}, "document_id"),
    ("get", "/v1/collections/default/documents/99999999999999999999", {}, "document_id"),
    ("get", "/v1/collections/default/documents/events", {"params": {"ids": "1;2"}}, "ids"),
    ("post", "/v1/collections", {"json": {"name": "bad name!"}}, "name"),
    ("post", "/v1/collections", {"json": {"name": "x", "settings": {"generator": "openai"}}}, "settings.generator"),
])
def test_malformed_requests_get_a_4xx_naming_the_field(deployment: Deployment, method: str, path: str,
                                                        kwargs: dict, field: str | None) -> None:
    with deployment.server.client(deployment.admin) as c:
        response = getattr(c, method)(path, **kwargs)
    assert 400 <= response.status_code < 500, response.text
    body = response.json()
    assert isinstance(body["error"], str) and "Traceback" not in body["error"]
    if field is not None:
        assert body["field"] == field or body["field"].startswith(field + "."), body  # "files.0": the first file


def test_a_path_in_an_upload_name_names_the_file_never_a_path(deployment: Deployment) -> None:
    with deployment.server.client(deployment.team_a) as c:
        response = c.post("/v1/collections/default/documents",
                          files=[("files", ("../../../etc/notes.md", b"# Notes\n\nA harmless note.\n"))])
        assert response.status_code == 202
        (doc,) = response.json()["documents"]
        assert doc["name"] == "notes.md"
        wait_settled(c, "default", [doc["id"]])
        assert c.delete(f"/v1/collections/default/documents/{doc['id']}").status_code == 204
    stored = deployment.server.home / "files"
    assert not (deployment.server.home.parent / "etc").exists() and all(
        len(p.name) == 64 for p in stored.iterdir())  # content-addressed: sha256 names only


def test_keys_scopes_and_trace_ids(deployment: Deployment) -> None:
    with deployment.server.client() as anonymous:
        response = anonymous.get("/v1/collections")
        assert response.status_code == 401 and "API key" in response.json()["error"]
        assert re.fullmatch(r"[0-9a-f]{32}", response.headers["x-trace-id"])
        assert anonymous.get("/healthz").status_code == 200
        trace = "0af7651916cd43dd8448eb211c80319c"
        echoed = anonymous.get("/healthz", headers={"traceparent": f"00-{trace}-b7ad6b7169203331-01"})
        # The server makes every trace id: an incoming traceparent is linked, never continued (docs/security.md).
        assert re.fullmatch(r"[0-9a-f]{32}", echoed.headers["x-trace-id"]) and echoed.headers["x-trace-id"] != trace
        assert "default-src 'self'" in anonymous.get("/").headers["content-security-policy"]
    with deployment.server.client(deployment.reader_a) as c:
        assert c.post("/v1/collections/default/documents", files=[("files", ("a.md", b"# a\n\nb\n"))]
                      ).status_code == 403
        assert c.post("/v1/collections", json={"name": "mine"}).status_code == 403
        assert [x["name"] for x in c.get("/v1/collections").json()["collections"]] == ["default"]
    with deployment.server.client(deployment.admin) as c:
        names = [x["name"] for x in c.get("/v1/collections").json()["collections"]]
        assert names[:1] == ["default"] and "other" in names


def test_collections_are_created_with_their_own_threshold_and_deleted(deployment: Deployment) -> None:
    with deployment.server.client(deployment.admin) as c:
        created = c.post("/v1/collections", json={"name": "strict", "settings": {"threshold": 0.2, "mode": "hybrid"}})
        assert created.status_code == 201 and created.json()["settings"]["threshold"] == 0.2
        assert created.json()["refusal"]["rule"] == "threshold"  # set explicitly: it wins over calibration
        assert c.post("/v1/collections", json={"name": "strict"}).status_code == 409
        up = c.post("/v1/collections/strict/documents",
                    files=[("files", ("ch03.en.html", MIXED[0].read_bytes()))]).json()["documents"]
        wait_settled(c, "strict", [up[0]["id"]])
        question = next(q for q in QUESTIONS if q["id"] == "dr-12-ticket")["query"]
        strict = c.post("/v1/collections/strict/ask", json={"question": question}).json()
        assert strict["refused"] and strict["refusal"]["threshold"] == 0.2  # the collection's own refusal rule
        strict_key = deployment.server.service.keys.create("strict", "read")
        assert c.delete("/v1/collections/strict").status_code == 204
        assert c.get("/v1/collections/strict").status_code == 404
        # A collection created again under the name starts with no keys: the old team's key does not come back.
        assert c.post("/v1/collections", json={"name": "strict"}).status_code == 201
        with deployment.server.client(strict_key) as old:
            assert old.get("/v1/collections/strict").status_code == 401
        assert c.delete("/v1/collections/strict").status_code == 204
        assert c.delete("/v1/collections/default").status_code == 409  # the home collection is the index folder


def test_a_new_collection_is_calibrated_by_its_first_uploads(deployment: Deployment) -> None:
    with deployment.server.client(deployment.admin) as c:
        created = c.post("/v1/collections", json={"name": "fresh"}).json()
        assert created["refusal"]["rule"] == "threshold" and created["refusal"]["calibration"] is None
        up = c.post("/v1/collections/fresh/documents",
                    files=[("files", ("ch03.en.html", MIXED[0].read_bytes()))]).json()["documents"]
        wait_settled(c, "fresh", [up[0]["id"]])
        refusal = c.get("/v1/collections/fresh").json()["refusal"]
        fit = refusal["calibration"]
        assert refusal["rule"] == "calibrated" and refusal["threshold"] == fit["threshold"]
        assert fit["documents"] == 1 and fit["synthetic"] > 0 and fit["bank"] > 0
        # Both cuts, and how questions are ranked, with nobody having written a question.
        assert refusal["lexical_threshold"] == fit["lexical_threshold"] and 0 < fit["lexical_threshold"] < 2
        retriever = c.get("/v1/collections/fresh").json()["retriever"]
        assert retriever["mode"] == "adaptive" and retriever["lexical_weight"] == 0.3
        assert retriever["foreign_share"] == 0.3 and "BM25" in retriever["description"]
        bread = c.post("/v1/collections/fresh/ask", json={"question": "How do I bake sourdough bread?"}).json()
        assert bread["refused"] and bread["refusal"]["threshold"] == fit["threshold"]
        question = next(q for q in QUESTIONS if q["id"] == "dr-12-ticket")["query"]
        assert not c.post("/v1/collections/fresh/ask", json={"question": question}).json()["refused"]
        assert c.delete("/v1/collections/fresh").status_code == 204


def test_upload_limits_give_413(tmp_path: Path) -> None:
    config = ServiceConfig(keys_required=False, max_upload_mb=0.05, max_files=2)
    with live_server(tmp_path / "home", config) as server, server.client() as c:
        big = c.post("/v1/collections/default/documents", files=[("files", ("big.md", b"x" * 80_000))])
        assert big.status_code == 413 and "limit" in big.json()["error"]
        many = c.post("/v1/collections/default/documents",
                      files=[("files", (f"{i}.md", b"# t\n\nword\n")) for i in range(3)])
        assert many.status_code == 413 and many.json()["field"] == "files"
        empty = c.post("/v1/collections/default/ask", json={"question": "anything"})
        assert empty.status_code == 409 and "no indexed documents" in empty.json()["error"]


def test_no_keys_only_on_loopback(tmp_path: Path) -> None:
    with pytest.raises(CiteragError, match="loopback"):
        ServiceConfig(host="0.0.0.0", keys_required=False).check()
    ServiceConfig(host="::1", keys_required=False).check()
    run = subprocess.run([sys.executable, "-m", "citerag.cli", "serve", "--index", str(tmp_path), "--host", "0.0.0.0",
                          "--no-keys"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and run.stderr.count("\n") == 1 and "loopback" in run.stderr


def test_the_same_new_file_uploaded_at_once_by_many_clients_is_one_document(deployment: Deployment) -> None:
    from concurrent.futures import ThreadPoolExecutor

    data = b"# Burst\n\nEight clients upload this note at the same moment.\n"

    def upload(_: int) -> httpx.Response:
        with deployment.server.client(deployment.team_a) as c:
            return c.post("/v1/collections/default/documents", files=[("files", ("burst.md", data))])

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(upload, range(8)))
    assert [r.status_code for r in responses] == [202] * 8
    docs = [r.json()["documents"][0] for r in responses]
    assert len({d["id"] for d in docs}) == 1 and sum(not d["existed"] for d in docs) == 1
    with deployment.server.client(deployment.team_a) as c:
        wait_settled(c, "default", [docs[0]["id"]])
        assert c.delete(f"/v1/collections/default/documents/{docs[0]['id']}").status_code == 204
