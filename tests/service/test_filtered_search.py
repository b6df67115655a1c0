"""Filters over HTTP, on both backends: applied inside the search (k results where k match), in the caches' keys,
named when wrong; the same through the OpenAI-compatible endpoint and the MCP tools."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from service_fixtures import Deployment

from citerag.search.filters import TYPES, Filters
from corpus_paths import DEV_SET

BACKENDS = ["deployment", "pg_deployment"]
QUESTIONS = {q["id"]: q for q in map(json.loads,
                                      (DEV_SET / "questions.jsonl").read_text(encoding="utf-8").splitlines())}
RED_DOT = QUESTIONS["dr-12-doc"]  # answered by ch03/ch04 (HTML) only


def _deployment(request: pytest.FixtureRequest, name: str) -> Deployment:
    found: Deployment = request.getfixturevalue(name)
    return found


def _documents(c: httpx.Client) -> list[dict[str, Any]]:
    return [d for d in c.get("/v1/collections/default/documents").json()["documents"] if d["status"] == "indexed"]


def _search(c: httpx.Client, query: str, k: int, filters: dict[str, Any] | None, mode: str = "dense") -> list[dict]:
    response = c.post("/v1/collections/default/search",
                      json={"query": query, "k": k, "mode": mode, **({"filters": filters} if filters else {})})
    assert response.status_code == 200, response.text
    results: list[dict] = response.json()["results"]
    return results


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_filtered_search_returns_the_best_k_of_the_matching_documents(request: pytest.FixtureRequest,
                                                                       backend: str) -> None:
    d = _deployment(request, backend)
    with d.server.client(d.reader_a) as c:
        documents = _documents(c)
        by_type: dict[str, list[dict]] = {}
        for doc in documents:
            by_type.setdefault(doc["stamps"]["extractor"], []).append(doc)
        assert {"html", "pdf", "docx", "xlsx", "transcript"} <= set(by_type)
        unfiltered = _search(c, RED_DOT["query"], 100, None)
        for kind, docs in by_type.items():
            ids = {doc["id"] for doc in docs}
            chunks = sum(doc["chunk_count"] for doc in docs)
            for mode in ("dense", "adaptive"):
                hits = _search(c, RED_DOT["query"], 30, {"type": kind}, mode)
                assert {h["document_id"] for h in hits} <= ids, (kind, mode)
                if mode == "dense":  # dense always finds k where k chunks match: never fewer after a filter
                    assert len(hits) == min(30, chunks), (kind, chunks)
                    # Its best is the best of those documents' chunks in the unfiltered ranking, where one is there.
                    allowed = [h for h in unfiltered if h["document_id"] in ids]
                    if allowed:
                        assert (hits[0]["document_id"], hits[0]["start"]) == \
                            (allowed[0]["document_id"], allowed[0]["start"])
        both = _search(c, RED_DOT["query"], 100, {"type": ["pdf", "docx"]})
        assert {h["document_id"] for h in both} == {doc["id"] for doc in by_type["pdf"] + by_type["docx"]}
        named = next(doc for doc in documents if doc["name"].startswith("ch03"))
        assert {h["document_id"] for h in _search(c, RED_DOT["query"], 20, {"path": "ch03*"})} == {named["id"]}
        assert _search(c, RED_DOT["query"], 20, {"source": "upload", "path": "ch03*", "language": "en"})
        # No document matches: no results (a source that holds none, a future date), not an error.
        assert _search(c, RED_DOT["query"], 20, {"source": "handbook"}) == []
        assert _search(c, RED_DOT["query"], 20, {"since": "2999-01-01"}) == []
        assert len(_search(c, RED_DOT["query"], 20, {"until": "2999-01-01"})) == 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_answer_only_in_filtered_out_documents_is_refused_and_the_cache_keeps_them_apart(
        request: pytest.FixtureRequest, backend: str) -> None:
    d = _deployment(request, backend)
    with d.server.client(d.reader_a) as c:
        html = {doc["id"] for doc in _documents(c) if doc["stamps"]["extractor"] == "html"}
        ask = {"question": RED_DOT["query"]}
        answered = c.post("/v1/collections/default/ask", json=ask).json()  # now in the answer cache
        assert not answered["refused"] and {x["document_id"] for x in answered["citations"]} <= html
        for _ in range(2):  # the second from the answer cache, under its own key
            filtered = c.post("/v1/collections/default/ask", json={**ask, "filters": {"type": ["pdf", "xlsx"]}}).json()
            assert filtered["refused"] and filtered["citations"] == [], filtered
        again = c.post("/v1/collections/default/ask", json=ask).json()
        assert again["cache"]["answer"] and again["citations"] == answered["citations"]
        kept = c.post("/v1/collections/default/ask", json={**ask, "filters": {"type": "html"}}).json()
        assert not kept["refused"] and {x["document_id"] for x in kept["citations"]} <= html
        streamed = c.post("/v1/collections/default/ask",
                          json={**ask, "stream": True, "filters": {"source": "handbook"}})
        assert streamed.status_code == 200 and "event: refusal" in streamed.text, streamed.text


@pytest.mark.parametrize(("filters", "field"), [
    ({"type": "exe"}, "filters.type"),
    ({"colour": "red"}, "filters.colour"),
    ({"source": 5}, "filters.source"),
    ({"since": "last week"}, "filters.since"),
    ({"path": ["docs/**", ""]}, "filters.path"),
    ("pdf", "filters"),
])
def test_a_wrong_filter_is_a_422_naming_it(deployment: Deployment, filters: Any, field: str) -> None:
    with deployment.server.client(deployment.reader_a) as c:
        for path, body in (("search", {"query": "x"}), ("ask", {"question": "x"}),
                           ("conversations", {"question": "x"})):
            response = c.post(f"/v1/collections/default/{path}", json={**body, "filters": filters})
            assert response.status_code == 422, response.text
            assert response.json()["field"].startswith(field), (path, response.json())
        chat = c.post("/v1/chat/completions", json={"model": "default", "filters": filters,
                                                    "messages": [{"role": "user", "content": "x"}]})
        assert chat.status_code == 422 and "filters" in chat.text, chat.text


def test_the_schema_describes_the_filters_citerag_checks(deployment: Deployment) -> None:
    with deployment.server.client(deployment.reader_a) as c:
        schema = c.get("/openapi.json").json()["components"]["schemas"]["SearchFilters"]["properties"]
    assert schema["type"]["anyOf"][0]["enum"] == list(TYPES)
    assert set(schema) == {f.name for f in dataclasses.fields(Filters)} - {"audience"}  # the server sets that one


def test_the_openai_endpoint_and_the_mcp_tools_take_filters(deployment: Deployment) -> None:
    with deployment.server.client(deployment.reader_a) as c:
        body = {"model": "default", "messages": [{"role": "user", "content": RED_DOT["query"]}]}
        open_ = c.post("/v1/chat/completions", json=body).json()
        assert not open_["refused"] and open_["citations"]
        closed = c.post("/v1/chat/completions", json={**body, "filters": {"type": "pdf"}}).json()
        assert closed["refused"] and not closed["citations"], closed

    async def tools() -> tuple[Any, Any, Any]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {deployment.reader_a}"}, timeout=120)
        async with Client(streamable_http_client(f"{deployment.server.url}/mcp", http_client=http)) as client:
            found = await client.call_tool("search", {"collection": "default", "query": RED_DOT["query"], "k": 5,
                                                      "filters": {"type": "docx"}})
            answer = await client.call_tool("ask", {"collection": "default", "question": RED_DOT["query"],
                                                    "filters": {"type": "pdf"}})
            wrong = await client.call_tool("search", {"collection": "default", "query": "x",
                                                      "filters": {"type": "exe"}})
            return found.structured_content, answer.structured_content, wrong

    found, answer, wrong = anyio.run(tools)
    assert found["results"] and {r["document_name"] for r in found["results"]} == {"docx-python-docx-paras-tables.docx"}
    assert answer["refused"] and answer["citations"] == []
    assert wrong.is_error and "filters.type" in wrong.content[0].text


@pytest.mark.parametrize("backend", BACKENDS)
def test_tags_given_at_upload_or_put_later_filter_the_very_next_search(request: pytest.FixtureRequest,
                                                                       backend: str) -> None:
    """A tag change is a new generation: the next search, from the retrieval cache or not, sees it."""
    d = _deployment(request, backend)
    with d.server.client(d.team_a) as c:
        docs = {doc["name"]: doc for doc in _documents(c)}
        pdf, docx = docs["pdf-2col-paper-jner2016-ccby.pdf"], docs["docx-python-docx-paras-tables.docx"]
        query = {"query": "Lorem ipsum dolor sit amet, consectetur adipiscing elit.", "k": 100, "mode": "dense"}
        tagged = {**query, "filters": {"tags": f"{backend}-team"}}
        assert c.post("/v1/collections/default/search", json=tagged).json()["results"] == []
        put = c.put(f"/v1/collections/default/documents/{pdf['id']}/tags", json={"tags": [f"{backend}-team", "x"]})
        assert put.status_code == 200 and put.json()["tags"] == [f"{backend}-team", "x"], put.text
        assert {h["document_id"] for h in c.post("/v1/collections/default/search", json=tagged).json()["results"]} \
            == {pdf["id"]}
        # The same bytes uploaded again with tags: the document's tags replaced, nothing re-indexed.
        again = c.post("/v1/collections/default/documents", data={"tags": [f"{backend}-team"]},
                       files=[("files", (docx["name"], _original(c, docx["id"])))])
        assert again.status_code == 202 and again.json()["documents"][0]["existed"], again.text
        assert c.get(f"/v1/collections/default/documents/{docx['id']}").json()["tags"] == [f"{backend}-team"]
        found = c.post("/v1/collections/default/search", json=tagged).json()["results"]
        assert [h["document_id"] for h in found][:2] == [docx["id"], pdf["id"]] and len(found) == 100
        for doc in (pdf, docx):
            assert c.put(f"/v1/collections/default/documents/{doc['id']}/tags", json={"tags": []}).status_code == 200
        assert c.post("/v1/collections/default/search", json=tagged).json()["results"] == []
        for body, field in (({"tags": ["a b"]}, "tags"), ({"tags": "x"}, "tags"), ({}, "tags")):
            wrong = c.put(f"/v1/collections/default/documents/{pdf['id']}/tags", json=body)
            assert wrong.status_code == 422 and wrong.json()["field"].startswith(field), wrong.text
        wrong = c.post("/v1/collections/default/documents", data={"tags": ["a b"]},
                       files=[("files", (docx["name"], b"x"))])
        assert wrong.status_code == 422 and wrong.json()["field"] == "tags", wrong.text
        assert c.put("/v1/collections/default/documents/99999999/tags", json={"tags": []}).status_code == 404
    with d.server.client(d.reader_a) as c:  # a reader may filter by tags but not set them
        assert c.put(f"/v1/collections/default/documents/{pdf['id']}/tags", json={"tags": []}).status_code == 403


def _original(c: httpx.Client, document_id: int) -> bytes:
    response = c.get(f"/v1/collections/default/documents/{document_id}/file")
    assert response.status_code == 200
    return response.content


def test_a_sources_tag_rules_are_taken_and_checked_over_the_api(deployment: Deployment) -> None:
    with deployment.server.client(deployment.admin) as c:
        url = "/v1/collections/default/sources"
        body = {"name": "tagged", "kind": "web", "location": "http://127.0.0.1:9/tagged/"}
        made = c.post(url, json={**body, "tags": [["**/runbooks/**", "sre"], ["**", "web"]]})
        assert made.status_code == 201, made.text
        try:
            assert c.get(f"{url}/tagged").json()["options"]["tags"] == [["**/runbooks/**", "sre"], ["**", "web"]]
        finally:
            assert c.delete(f"{url}/tagged").status_code in (200, 204)
        for rules in ([["**", "two words"]], [["", "x"]], [["**"]], "sre"):
            wrong = c.post(url, json={**body, "tags": rules})
            assert wrong.status_code == 422 and wrong.json()["field"].startswith("tags"), wrong.text
