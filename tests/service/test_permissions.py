"""Document permissions (issue 30), probed like the isolation tests, on both backends: in a collection where one
chapter is for the `sre` group and another for `hr`, a caller outside a document's groups never sees its text,
title, name, id or chunk count on any route of the route table (the same answer as for a document that does not
exist), nor through conversations, traces, feedback, the OpenAI-compatible endpoint or the MCP tools; its searches
are the exact top-k of what it may read; a question only a hidden document answers is refused as if that document
did not exist; and a permission change is seen by every request after its commit, racing searches included."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from live import wait_settled
from mcp import Client
from service_fixtures import Deployment
from test_isolation import RED_DOT, SECRET_QUESTIONS, _bodies, _queries, collection_routes, haystack, long_lines
from test_mcp import _http, _run

from corpus_paths import DEV_CORPUS

NAME = "perm"
FILES = {"ch03.en.html": ["sre"], "ch04.en.html": [], "ch06.en.html": ["hr"]}  # name -> groups that may read it
MISSING = 4242
PROBE_TIMEOUT = 30.0


@dataclass
class Perm:
    deployment: Deployment
    ids: dict[str, int]  # name -> document id
    lines: dict[str, set[str]]  # name -> its long lines
    titles: dict[str, str]
    raw: dict[str, str]  # name -> its canonical text and its file's bytes (as text)
    plain: str  # read, no user, no groups: the open document only
    sre: str  # a service key of group sre
    alice: str  # write, the key of user alice (group hr)
    admin: str  # the collection's admin: every document

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.deployment.server.url, timeout=PROBE_TIMEOUT,
                            headers={"Authorization": f"Bearer {key}"})

    def hidden_from(self, key: str) -> list[str]:
        return {self.plain: ["ch03.en.html", "ch06.en.html"], self.sre: ["ch06.en.html"],
                self.alice: ["ch03.en.html"], self.admin: []}[key]

    def leaks(self, response: httpx.Response, hidden: list[str]) -> list[str]:
        """What of the hidden documents a response shows: a long line, the name or title, or its id as a document's
        (its chunk count comes only beside its id). Strings that a document the caller may read holds too (a
        chapter's cross-reference to another) are not the hidden one's to leak."""
        text = haystack(response)
        readable = "\n".join(self.raw[n] for n in FILES if n not in hidden)
        secrets = [(name, "line " + line[:50], line) for name in hidden for line in self.lines[name]] + \
            [(name, "name", name) for name in hidden] + [(name, "title", self.titles[name]) for name in hidden]
        found = [f"{name}: {what}" for name, what, value in secrets if value and value in text
                 and value not in readable]
        ids = {self.ids[name] for name in hidden}
        for payload in _payloads(response):
            for key, value in _pairs(payload):
                if key in ("id", "document_id") and value in ids:
                    found.append(f"document id {value} under {key!r}")
                if key.endswith("document_ids") and isinstance(value, list) and ids & set(value):
                    found.append(f"document ids {value} under {key!r}")
        return found


def _payloads(response: httpx.Response) -> Iterator[Any]:
    for text in [response.text] + [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]:
        try:
            yield json.loads(text)
        except ValueError:
            continue


def _pairs(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield str(k), v
            yield from _pairs(v)
    elif isinstance(value, list):
        for v in value:
            yield from _pairs(v)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def perm(request: pytest.FixtureRequest) -> Iterator[Perm]:
    deployment: Deployment = request.getfixturevalue("deployment" if request.param == "sqlite" else "pg_deployment")
    server = deployment.server
    keys = server.service.keys
    with server.client(deployment.admin) as c:
        if NAME not in [x["name"] for x in c.get("/v1/collections").json()["collections"]]:
            assert c.post("/v1/collections", json={"name": NAME}).status_code == 201
        ids = {}
        for name, groups in FILES.items():
            sent = c.post(f"/v1/collections/{NAME}/documents", data={"groups": groups},
                          files=[("files", (name, (DEV_CORPUS / name).read_bytes()))])
            assert sent.status_code == 202, sent.text
            ids[name] = sent.json()["documents"][0]["id"]
        docs = wait_settled(c, NAME, list(ids.values()))
        assert [d["status"] for d in docs] == ["indexed"] * 3 and [d["groups"] for d in docs] == list(FILES.values())
        texts = {n: c.get(f"/v1/collections/{NAME}/documents/{i}/text").text for n, i in ids.items()}
        lines = {n: long_lines(t) for n, t in texts.items()}
        raw = {n: texts[n] + "\n" + (DEV_CORPUS / n).read_text(encoding="utf-8") for n in ids}
        assert all(len(found) > 50 for found in lines.values())
    keys.put_user("alice", ["hr"])
    yield Perm(deployment, ids, lines, {d["name"]: d["title"] for d in docs}, raw,
               keys.create(NAME, "read"), keys.create(NAME, "read", groups=["sre"]),
               keys.create(NAME, "write", user="alice"), keys.create(NAME, "admin"))
    with server.client(deployment.admin) as c:
        c.delete(f"/v1/collections/{NAME}")


def _reads(perm: Perm) -> list[tuple[str, str, dict[str, Any], str]]:
    """(method, url, kwargs, label) for every read-scope route of the collection, with every document id (each one's,
    a missing one) and bodies that a reader would succeed with."""
    out = []
    files = {"ch04.en.html": (DEV_CORPUS / "ch04.en.html").read_bytes()}
    for method, path, route in collection_routes(perm.deployment):
        params = set(route.param_convertors)
        if method not in ("GET", "POST") or "source" in params or "/labels" in path or path[-10:] == "/documents" \
                and method == "POST":
            continue
        doc_ids = [*perm.ids.values(), MISSING] if "document_id" in params else [None]
        others = ["0" * 32] if params & {"conversation_id", "trace_id"} else [None]
        for doc_id, other in itertools.product(doc_ids, others):
            url = path.format(name=NAME, document_id=doc_id, conversation_id=other, trace_id=other)
            for label, kwargs in _bodies(route, None, files):
                for query in _queries(route, list(perm.ids.values())):
                    if path.endswith("/events") and not query.get("ids"):
                        continue  # every document's events: a stream that stays open
                    extra = {"params": query} if query else {}
                    out.append((method, url, {**kwargs, **extra}, f"{method} {url} {label} {query or ''}"))
    return out


def _as_missing(response: httpx.Response, doc_id: int) -> tuple[int, str]:
    """The response with the document's id written as the missing one's: equal to the missing one's, or it tells."""
    return response.status_code, re.sub(rf"\b{doc_id}\b", str(MISSING), response.text)


def test_a_caller_outside_a_documents_groups_never_sees_it_on_any_route(perm: Perm) -> None:
    failures: list[str] = []
    sent = 0
    probes = _reads(perm)
    for key in (perm.plain, perm.sre, perm.alice):
        hidden = perm.hidden_from(key)
        with perm.client(key) as client:
            missing_answers: dict[str, tuple[int, str]] = {}
            for method, url, kwargs, label in probes:
                try:
                    response = client.request(method, url, **kwargs)
                except httpx.HTTPError as exc:
                    raise AssertionError(f"{label}: {exc}") from exc
                sent += 1
                if response.status_code >= 500:
                    failures.append(f"{label}: {response.status_code}")
                if leaked := perm.leaks(response, hidden):
                    failures.append(f"{label} ({hidden}): {leaked[:3]}")
                if f"/{MISSING}" in url:
                    missing_answers[url.replace(f"/{MISSING}", "/ID")] = _as_missing(response, MISSING)
            for method, url, kwargs, label in probes:  # a hidden document's routes: exactly a missing one's
                for name in hidden:
                    doc_id = perm.ids[name]
                    if f"/{doc_id}" in url and "stream" not in label:
                        response = client.request(method, url, **kwargs)
                        sent += 1
                        if _as_missing(response, doc_id) != missing_answers[url.replace(f"/{doc_id}", "/ID")]:
                            failures.append(f"{label}: {response.status_code} {response.text[:120]} differs from "
                                            "a missing document's")
    assert not failures, "\n".join(failures[:20])
    assert sent > 300, sent  # several hundred requests, or the route table was not read


def test_searches_are_the_exact_top_k_of_what_the_caller_may_read(perm: Perm) -> None:
    """Dense: the same ranking as the admin's search filtered to the same documents. BM25 and hybrid rank with the
    caller's own statistics (a hidden document changes no score), so their exactness is the index contract's
    (index_contract.py: the reference over the readable documents alone) and the deletion test's below; here, k
    hits when k exist (BM25: the chunks holding a query word), all readable, the best first."""
    visible = {perm.plain: ["ch04.en.html"], perm.sre: ["ch03.en.html", "ch04.en.html"]}
    with perm.client(perm.admin) as admin:
        for key, names in visible.items():
            with perm.client(key) as client:
                for query in [*SECRET_QUESTIONS[:6], "systemctl status failed unit", "hostname"]:
                    for mode in ("hybrid", "dense", "bm25"):
                        body = {"query": query, "k": 10, "mode": mode}
                        mine = client.post(f"/v1/collections/{NAME}/search", json=body).json()["results"]
                        assert {r["document_name"] for r in mine} <= set(names), (query, mode)
                        assert len(mine) == 10 or mode == "bm25" and len(mine) < 10  # BM25: the chunks with its words
                        assert [r["score"] for r in mine] == sorted((r["score"] for r in mine), reverse=True)
                        if mode != "dense":
                            continue
                        exact = admin.post(f"/v1/collections/{NAME}/search",
                                           json={**body, "filters": {"path": names}}).json()["results"]
                        assert [(r["document_id"], r["start"], r["end"]) for r in mine] == \
                            [(r["document_id"], r["start"], r["end"]) for r in exact], (key, query, mode)
    with perm.client(perm.sre) as sre:  # not vacuous: the sre key finds the red dot in its chapter
        found = sre.post(f"/v1/collections/{NAME}/search", json={"query": RED_DOT, "k": 3}).json()["results"]
        assert found[0]["document_name"] == "ch03.en.html"


def _answer(client: httpx.Client, question: str) -> dict[str, Any]:
    response = client.post(f"/v1/collections/{NAME}/ask", json={"question": question})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in ("trace_id", "timings", "timings_ms", "cache")}


def test_conversations_traces_feedback_openai_and_mcp_follow_the_groups(perm: Perm) -> None:
    with perm.client(perm.sre) as sre, perm.client(perm.plain) as plain, perm.client(perm.admin) as admin:
        asked = sre.post(f"/v1/collections/{NAME}/conversations", json={"question": RED_DOT}).json()
        assert not asked["refused"] and {c["document_name"] for c in asked["citations"]} == {"ch03.en.html"}
        trace = asked["trace_id"]
        # Another caller may not read the trace of an answer citing a document it may not read, nor give feedback.
        for response in (plain.get(f"/v1/traces/{trace}"),
                         plain.post(f"/v1/collections/{NAME}/answers/{trace}/feedback", json={"helpful": True})):
            assert response.status_code == 404 and not perm.leaks(response, ["ch03.en.html"])
        assert sre.get(f"/v1/traces/{trace}").status_code == 200
        # The chapter is given to hr: the sre key's conversation keeps its question, the answer is withheld.
        doc = perm.ids["ch03.en.html"]
        assert admin.put(f"/v1/collections/{NAME}/documents/{doc}/groups", json={"groups": ["hr"]}).status_code == 200
        try:
            read = sre.get(f"/v1/collections/{NAME}/conversations/{asked['conversation_id']}")
            assert read.status_code == 200 and read.json()["turns"][0]["question"] == RED_DOT
            assert not perm.leaks(read, ["ch03.en.html"]) and read.json()["turns"][0]["citations"] == []
            follow = sre.post(f"/v1/collections/{NAME}/conversations/{asked['conversation_id']}",
                              json={"question": "And how do I see its log?"})
            assert follow.status_code == 200 and not perm.leaks(follow, ["ch03.en.html"])
            assert sre.get(f"/v1/traces/{trace}").status_code == 404
            again = _answer(sre, RED_DOT)  # the cached answer of before the change is not served
            assert again["refused"] and not again["citations"]
        finally:
            admin.put(f"/v1/collections/{NAME}/documents/{doc}/groups", json={"groups": ["sre"]})
        # The OpenAI-compatible endpoint and MCP, as the plain reader.
        chat = plain.post("/v1/chat/completions", json={"model": NAME, "messages": [{"role": "user",
                                                                                      "content": RED_DOT}]})
        assert chat.status_code == 200 and not perm.leaks(chat, ["ch03.en.html", "ch06.en.html"])
        assert ("refused", True) in list(_pairs(chat.json()))
    hidden_id = perm.ids["ch03.en.html"]

    async def tools(client: Client) -> list[Any]:
        return [await client.call_tool("read_document", {"collection": NAME, "document_id": hidden_id}),
                await client.call_tool("read_document", {"collection": NAME, "document_id": MISSING}),
                await client.call_tool("search", {"collection": NAME, "query": RED_DOT, "k": 20}),
                await client.call_tool("ask", {"collection": NAME, "question": RED_DOT}),
                await client.call_tool("list_collections", {})]

    hidden_read, missing_read, found, asked, listed = _run(_http(perm.deployment.server.url, perm.plain), tools)
    assert hidden_read.is_error and missing_read.is_error
    assert hidden_read.content[0].text.replace(str(hidden_id), str(MISSING)) == missing_read.content[0].text
    assert {r["document_name"] for r in found.structured_content["results"]} == {"ch04.en.html"}
    assert asked.structured_content["refused"] and not asked.structured_content["citations"]
    assert listed.structured_content["collections"] == [{"name": NAME, "documents": 1}]
    shown = json.dumps([found.structured_content, asked.structured_content], ensure_ascii=False)
    assert not any(line in shown for line in perm.lines["ch03.en.html"])


def test_a_permission_change_is_seen_by_every_request_after_its_commit(perm: Perm) -> None:
    """Searches race group changes of the red-dot chapter: a search sent after a change's response arrived never
    shows the state before it."""
    doc = perm.ids["ch03.en.html"]
    changes: list[tuple[float, float, bool]] = []  # (sent, answered, the sre key may read it afterwards)
    seen: list[tuple[float, float, bool]] = []  # (sent, answered, the chapter was among the hits)
    stop = threading.Event()

    def search() -> None:
        with perm.client(perm.sre) as sre:
            while not stop.is_set():
                sent = time.monotonic()
                response = sre.post(f"/v1/collections/{NAME}/search", json={"query": RED_DOT, "k": 5})
                assert response.status_code == 200, response.text
                hits = response.json()["results"]
                seen.append((sent, time.monotonic(), any(h["document_id"] == doc for h in hits)))

    threads = [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        with perm.client(perm.admin) as admin:
            for groups in itertools.islice(itertools.cycle([["hr"], ["sre"]]), 12):
                time.sleep(0.15)
                sent = time.monotonic()
                response = admin.put(f"/v1/collections/{NAME}/documents/{doc}/groups", json={"groups": groups})
                assert response.status_code == 200
                changes.append((sent, time.monotonic(), groups == ["sre"]))
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    # A search sent after a change was answered, during which no other change was under way, shows that change.
    wrong = []
    for sent, answered, found in seen:
        before = [c for c in changes if c[1] < sent]
        overlapping = [c for c in changes if c[0] <= answered and c[1] >= sent]
        if before and not overlapping and found != before[-1][2]:
            wrong.append((sent, answered, found, before[-1]))
    assert len(seen) > 40 and not wrong, wrong[:5]
    assert {found for _, _, found in seen} == {True, False}  # both states were seen


def test_writes_on_a_hidden_document_are_a_missing_documents_and_bad_groups_are_422s(perm: Perm) -> None:
    hidden = perm.ids["ch03.en.html"]
    with perm.client(perm.alice) as alice, perm.client(perm.admin) as admin:
        before = admin.get(f"/v1/collections/{NAME}/documents/{hidden}").json()
        for method, suffix, kwargs in (("PUT", "/groups", {"json": {"groups": ["hr"]}}),
                                       ("PUT", "/tags", {"json": {"tags": ["x"]}}),
                                       ("POST", "/retry", {}), ("DELETE", "", {}),
                                       ("PUT", "", {"files": [("file", ("x.html", b"<p>new</p>"))]})):
            got = alice.request(method, f"/v1/collections/{NAME}/documents/{hidden}{suffix}", **kwargs)
            missing = alice.request(method, f"/v1/collections/{NAME}/documents/{MISSING}{suffix}", **kwargs)
            assert _as_missing(got, hidden) == _as_missing(missing, MISSING), (method, suffix, got.text)
        # Uploading under the hidden document's name says only that the name is taken.
        taken = alice.post(f"/v1/collections/{NAME}/documents",
                           files=[("files", ("ch03.en.html", b"<p>mine</p>"))])
        assert taken.status_code == 409 and taken.json()["field"] == "files"
        assert not perm.leaks(taken, ["ch03.en.html"]) or "ch03.en.html" in taken.json()["error"]
        assert admin.get(f"/v1/collections/{NAME}/documents/{hidden}").json() == before
        bad = alice.put(f"/v1/collections/{NAME}/documents/{perm.ids['ch06.en.html']}/groups",
                        json={"groups": ["has space"]})
        assert bad.status_code == 422 and bad.json()["field"] == "groups"
        bad = alice.post(f"/v1/collections/{NAME}/documents", data={"groups": ["-x"]},
                         files=[("files", ("n.md", b"# N\n\nA note.\n"))])
        assert bad.status_code == 422 and bad.json()["field"] == "groups"


def test_the_audit_trail_says_who_asked_what_and_who_changed_whose_permissions(perm: Perm) -> None:
    sre_prefix = "key:" + perm.sre.split("_")[1]
    with perm.client(perm.sre) as sre, perm.client(perm.admin) as admin, perm.client(perm.plain) as plain:
        asked = _answer(sre, RED_DOT)
        doc = perm.ids["ch03.en.html"]
        assert sre.get(f"/v1/collections/{NAME}/documents/{doc}/text").status_code == 200
        assert admin.put(f"/v1/collections/{NAME}/documents/{doc}/groups", json={"groups": ["sre", "oncall"]}
                         ).status_code == 200
        admin.put(f"/v1/collections/{NAME}/documents/{doc}/groups", json={"groups": ["sre"]})
        assert plain.get(f"/v1/collections/{NAME}/audit").status_code == 403  # a reader reads no trail
        trail = admin.get(f"/v1/collections/{NAME}/audit", params={"principal": sre_prefix, "limit": 1000})
        assert trail.status_code == 200, trail.text
        events = trail.json()["events"]
        ask = next(e for e in events if e["action"] == "ask" and e["trace_id"] == asked["trace_id"])
        assert ask["documents"] == [doc] and ask["collection"] == NAME and ask["detail"]["refused"] is False
        assert "question" not in ask["detail"]  # the collection keeps no trace text, nor does its trail
        assert any(e["action"] == "document.read" and e["documents"] == [doc] for e in events)
        changes = admin.get(f"/v1/collections/{NAME}/audit", params={"action": "document.groups"}).json()["events"]
        admin_prefix = "key:" + perm.admin.split("_")[1]
        assert [(e["principal"], e["detail"]["before"], e["detail"]["groups"]) for e in changes[:2]] == \
            [(admin_prefix, ["sre", "oncall"], ["sre"]), (admin_prefix, ["sre"], ["sre", "oncall"])]


def test_a_question_only_a_hidden_document_answers_is_refused_as_if_it_did_not_exist(perm: Perm) -> None:
    """Last: it deletes the red-dot chapter. The plain reader's refusal before and after are the same answer."""
    with perm.client(perm.plain) as plain, perm.client(perm.sre) as sre, perm.client(perm.admin) as admin:
        assert not _answer(sre, RED_DOT)["refused"]  # the sre group gets it answered
        questions = (RED_DOT, *SECRET_QUESTIONS[:4])
        hidden = [_comparable(_answer(plain, q)) for q in questions]
        # Scores too: BM25's N, df and mean length are those of the documents the caller may read.
        hidden_scores = [_scores(plain, q, mode) for q in questions for mode in ("bm25", "hybrid", "dense")]
        assert hidden[0]["refused"] and hidden[0]["citations"] == []
        assert admin.delete(f"/v1/collections/{NAME}/documents/{perm.ids['ch03.en.html']}").status_code == 204
        gone = [_comparable(_answer(plain, q)) for q in questions]
        assert hidden == gone
        assert hidden_scores == [_scores(plain, q, mode) for q in questions for mode in ("bm25", "hybrid", "dense")]


def _scores(client: httpx.Client, query: str, mode: str) -> list[tuple[int, int, float]]:
    found = client.post(f"/v1/collections/{NAME}/search", json={"query": query, "k": 10, "mode": mode})
    return [(r["document_id"], r["start"], round(r["score"], 9)) for r in found.json()["results"]]
