"""Isolation between collections, probed from the app's own route table: a key scoped to another collection gets
a 404 on every route of "default" (never a 403 that confirms the name, never one of its chunks), a missing,
forged or revoked key a 401; a reader of "default" sees it (200) but may not change it (403); and nothing a
probe sent was written. On both backends: the home on SQLite and the same deployment on PostgreSQL."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from service_fixtures import Deployment

from citerag.service import auth
from corpus_paths import DEV_SET

MIN_LINE = 40  # a line of a default document this long is that document's text, not a common phrase
# The dev-set questions whose answers are only in "default" (its chapters 3 and 4), and one about its spreadsheet.
_DEV = [json.loads(line) for line in (DEV_SET / "questions.jsonl").read_text(encoding="utf-8").splitlines() if line]
SECRET_QUESTIONS = [q["query"] for q in _DEV if q["source"] in ("ch03.en.html", "ch04.en.html")] + [
    "What is the spreadsheet of datasets about?"]
RED_DOT = "What unit state is signalled by a red dot in the output of systemctl status?"
assert RED_DOT in SECRET_QUESTIONS and len(SECRET_QUESTIONS) >= 10
MISSING_IDS = [0, 4242, 999_999, 2**53]  # ids no document of either collection has
SOURCE = "handbook"  # default's source (service_fixtures: a website never synced)
# The collection's name as written and percent-encoded (the server routes on the decoded path: the same collection).
NAME_FORMS = ["default", "%64efault"]
PROBE_TIMEOUT = 20.0  # a probe that does not answer at once (an event stream left open) fails the test


@dataclass
class Probe:
    method: str
    url: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def send(self, client: httpx.Client) -> httpx.Response:
        return client.request(self.method, self.url, **self.kwargs)


# --- the route table ------------------------------------------------------------------------------------------

def _scope(route: APIRoute) -> str | None:
    """Which collection check guards the route: read, write or admin (None: none, an isolation hole)."""
    checks = {auth.reader: "read", auth.writer: "write", auth.admin: "admin"}
    found: set[str] = set()
    stack = list(route.dependant.dependencies)
    while stack:
        dep = stack.pop()
        if dep.call in checks:
            found.add(checks[dep.call])
        stack.extend(dep.dependencies)
    assert len(found) <= 1, f"{route.path}: more than one collection check {found}"
    return found.pop() if found else None


def api_routes(app: Any) -> list[tuple[str, APIRoute]]:
    """(path as served, route) for every API route of the app, through included routers."""
    try:
        from fastapi.routing import iter_route_contexts  # FastAPI >= 0.160: app.routes holds included routers
    except ImportError:  # pragma: no cover - older FastAPI flattens them into app.routes
        return [(r.path, r) for r in app.routes if isinstance(r, APIRoute)]
    contexts = iter_route_contexts(app.routes)
    return [(c.path, c.original_route) for c in contexts if isinstance(c.original_route, APIRoute)]


def collection_routes(deployment: Deployment) -> list[tuple[str, str, APIRoute]]:
    """(method, path, route) for every API route under a collection's name, each checked to be guarded."""
    out = []
    for path, route in api_routes(deployment.server.app):
        if "{name}" in path:
            assert _scope(route) is not None, f"{path} does not check the caller may see the collection"
            out.extend((method, path, route) for method in sorted(route.methods))
    assert len(out) >= 14, out  # the API as written: more routes are fine, fewer means the table was not read
    return out


def _body_params(route: APIRoute) -> dict[str, Any]:
    return {p.name: p for p in route.dependant.body_params}


def _bodies(route: APIRoute, doc_name: str | None, default_files: dict[str, bytes],
            answered: str = "0" * 32) -> Iterator[tuple[str, dict]]:
    """Request bodies that an authorised key's request would be answered with a 2xx for (`answered`: the trace id
    of an answer in "default", for a label)."""
    body = _body_params(route)
    if not body:
        yield "", {}
        return
    if "files" in body:  # upload: a new file, a copy of one of default's files, its bytes under a new name
        name, data = next(iter(default_files.items()))
        yield "new file", {"files": [("files", ("probe-note.md", b"# Probe\n\nA note that must never be stored.\n"))]}
        yield "same file", {"files": [("files", (name, data))]}
        yield "renamed copy", {"files": [("files", ("copy-" + name, data)), ("files", ("b.md", b"# B\n\nTwo.\n"))]}
        return
    if "file" in body:  # replace: a new version in the document's own format
        suffix = "." + doc_name.rsplit(".", 1)[-1] if doc_name and "." in doc_name else ".md"
        yield "new version", {"files": [("file", ("replacement" + suffix, b"<p>A replacement never stored.</p>"))]}
        return
    model = body["request"].field_info.annotation if "request" in body else None
    fields = set(getattr(model, "model_fields", {}))
    if "question" in fields:
        for i, question in enumerate(SECRET_QUESTIONS):
            yield f"ask {i}", {"json": {"question": question}}
            yield f"ask {i} stream", {"json": {"question": question, "stream": True}}
        yield "ask bm25 k", {"json": {"question": RED_DOT, "mode": "bm25", "k": 50,
                                      "threshold": 2.0, "max_sources": 20}}
        yield "ask filtered", {"json": {"question": RED_DOT, "filters": {"type": "html", "source": "upload"}}}
        return
    if fields == {"tags"}:  # a document's tags
        yield "tags", {"json": {"tags": ["probe"]}}
        return
    if fields == {"groups"}:  # who may read a document
        yield "groups", {"json": {"groups": ["probe"]}}
        return
    if "trace_id" in fields:  # a label: out of domain (a needle's span would name a document of default)
        yield "label", {"json": {"trace_id": answered, "ood": True}}
        return
    if {"kind", "location"} <= fields:  # a source: a website that is never synced (a closed port)
        yield "source", {"json": {"name": "probe-source", "kind": "web", "location": "http://127.0.0.1:9/docs/"}}
        return
    if "helpful" in fields:
        yield "feedback", {"json": {"helpful": False, "none_right": True, "comment": "a probe's comment"}}
        return
    if "query" in fields:
        for i, query in enumerate(SECRET_QUESTIONS):
            yield f"search {i}", {"json": {"query": query}}
        for mode in ("dense", "bm25", "hybrid"):
            yield f"search {mode}", {"json": {"query": "systemctl status failed unit", "mode": mode, "k": 100}}
        yield "search filtered", {"json": {"query": RED_DOT, "k": 100, "filters": {"path": "**", "tags": "probe"}}}
        return
    raise AssertionError(f"{route.path}: no probe body for {sorted(body)}; add one that an authorised key "
                         "would succeed with")


def _queries(route: APIRoute, ids: list[int]) -> list[dict[str, str]]:
    names = {p.name for p in route.dependant.query_params} | {
        p.name for d in route.dependant.dependencies for p in d.query_params}
    if not names:
        return [{}]
    if names == {"wait"}:  # a source's sync: at once, or queued
        return [{"wait": "true"}, {}]
    if names == {"n", "days"}:  # the labelling queue
        return [{"n": "5"}, {"n": "50", "days": "30"}, {}]
    if names == {"principal", "action", "document", "since", "until", "limit"}:  # the audit trail's filters
        return [{}, {"document": str(ids[0]), "action": "document", "since": "2000-01-01"}]
    assert names == {"ids"}, f"{route.path}: no probe values for query parameters {sorted(names)}"
    return [{"ids": ",".join(map(str, ids))}, {"ids": str(ids[0])}, {"ids": ""}, {}]


def _asked(deployment: Deployment, key: str, route: str, field: str) -> str:
    """The red-dot question asked in "default" by `key` through `route`; the response's `field`."""
    with deployment.server.client(key) as c:
        response = c.post(f"/v1/collections/default/{route}", json={"question": RED_DOT})
        assert response.status_code == 200, response.text
        found: str = response.json()[field]
        return found


def start_conversation(deployment: Deployment, key: str) -> str:
    return _asked(deployment, key, "conversations", "conversation_id")


def answer_trace(deployment: Deployment, key: str) -> str:
    """The trace id of an answer in "default" (what feedback names)."""
    return _asked(deployment, key, "ask", "trace_id")


def probes(deployment: Deployment, names: dict[int, str], default_files: dict[str, bytes]) -> list[Probe]:
    """Every method of every route of "default", its ids real and missing, with bodies that would succeed."""
    real = sorted(names)
    out = []
    talk = start_conversation(deployment, deployment.team_a)  # default's, with its quotes in the answer
    answered = answer_trace(deployment, deployment.team_a)
    for method, path, route in collection_routes(deployment):
        params = set(route.param_convertors)
        assert params <= {"name", "document_id", "conversation_id", "trace_id", "source"}, \
            f"{route.path}: no probe values for {params}"
        doc_ids: list[int | None] = [*real, *MISSING_IDS] if "document_id" in params else [None]
        talks = [talk, "0" * 32] if "conversation_id" in params else [None]
        traces = [answered, "0" * 32] if "trace_id" in params else [None]
        named = [SOURCE, "no-such-source"] if "source" in params else [None]
        for name, doc_id, cid, tid, src in itertools.product(NAME_FORMS, doc_ids, talks, traces, named):
            url = path.format(name=name, document_id=doc_id, conversation_id=cid, trace_id=tid, source=src)
            doc_name = names.get(doc_id) if doc_id is not None else None
            for label, kwargs in _bodies(route, doc_name, default_files, answered):
                for query in _queries(route, real):
                    extra = {"params": query} if query else {}
                    out.append(Probe(method, url, {**kwargs, **extra}, f"{method} {url} {label} {query or ''}"))
    return out


# --- what must never be seen ----------------------------------------------------------------------------------

def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def haystack(response: httpx.Response) -> str:
    """Everything a client could read: headers, the body as sent and, decoded, its JSON and its events' JSON."""
    parts = [f"{k}: {v}" for k, v in response.headers.items()] + [response.text]
    payloads = [response.text] + [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    for payload in payloads:
        with contextlib.suppress(ValueError):
            parts.extend(_strings(json.loads(payload)))
    return "\n".join(parts)


@dataclass
class Secrets:
    lines: set[str]  # lines of default's canonical texts (>= MIN_LINE characters)
    names: set[str]  # default's document names

    def leaks(self, text: str) -> list[str]:
        return sorted({s for s in self.lines | self.names if s in text})


def texts(client: httpx.Client, collection: str) -> dict[str, str]:
    docs = client.get(f"/v1/collections/{collection}/documents").json()["documents"]
    out = {}
    for doc in docs:
        response = client.get(f"/v1/collections/{collection}/documents/{doc['id']}/text")
        assert response.status_code == 200, (doc, response.text)
        out[doc["name"]] = response.text
    return out


def long_lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines() if len(line.strip()) >= MIN_LINE}


def snapshot(client: httpx.Client, collection: str) -> list[tuple[Any, ...]]:
    response = client.get(f"/v1/collections/{collection}/documents")
    assert response.status_code == 200, response.text
    return sorted((d["id"], d["name"], d["status"], d["sha256"], d["chunk_count"], d["error"])
                  for d in response.json()["documents"])


def state(deployment: Deployment) -> tuple[Any, ...]:
    """Default's documents as team_a sees them, other's as team_b does, and every collection's name."""
    with deployment.server.client(deployment.team_a) as a, deployment.server.client(deployment.team_b) as b, \
            deployment.server.client(deployment.admin) as admin:
        names = sorted(n["name"] for n in admin.get("/v1/collections").json()["collections"])
        return snapshot(a, "default"), snapshot(b, "other"), names


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def deployment(request: pytest.FixtureRequest, deployment: Deployment) -> Deployment:
    """Every probe on both backends: the SQLite home the other service tests share, and the same on PostgreSQL."""
    if request.param == "sqlite":
        return deployment
    pg: Deployment = request.getfixturevalue("pg_deployment")
    return pg


@pytest.fixture(scope="module")
def default_docs(deployment: Deployment) -> dict[int, str]:
    """id -> name of default's documents as they are now (every one indexed)."""
    with deployment.server.client(deployment.admin) as c:
        docs = c.get("/v1/collections/default/documents").json()["documents"]
    assert docs and all(d["status"] == "indexed" for d in docs), docs
    return {d["id"]: d["name"] for d in docs}


@pytest.fixture(scope="module")
def secrets(deployment: Deployment, default_docs: dict[int, str]) -> Secrets:
    with deployment.server.client(deployment.admin) as c:
        default = texts(c, "default")
    lines = set().union(*(long_lines(t) for t in default.values()))
    assert len(lines) > 200, len(lines)  # real text, or the leak check would prove nothing
    return Secrets(lines, set(default))


@pytest.fixture(scope="module")
def default_files(deployment: Deployment, default_docs: dict[int, str]) -> dict[str, bytes]:
    with deployment.server.client(deployment.admin) as c:
        return {name: c.get(f"/v1/collections/default/documents/{i}/file").content for i, name in default_docs.items()}


# --- the probes -----------------------------------------------------------------------------------------------

def test_every_route_of_another_collection_is_404_and_leaks_nothing(
        deployment: Deployment, default_docs: dict[int, str], secrets: Secrets,
        default_files: dict[str, bytes]) -> None:
    server = deployment.server
    keys = server.service.keys  # the server's own key store, on either backend
    revoked = keys.create("default", "write")
    assert keys.revoke(revoked[len("crk_"):].partition("_")[0])
    before = state(deployment)
    all_probes = probes(deployment, default_docs, default_files)

    # team_b: a valid key, another collection's. As a header and as the browser's session cookie (signed in as the
    # page does; its writes carry the page's own Origin, so they pass the forgery check and meet the isolation one).
    team_b_header = httpx.Client(base_url=server.url, timeout=PROBE_TIMEOUT,
                                 headers={"Authorization": f"Bearer {deployment.team_b}"})
    team_b_cookie = httpx.Client(base_url=server.url, timeout=PROBE_TIMEOUT,
                                 headers={"Origin": server.url, "Sec-Fetch-Site": "same-origin"})
    assert team_b_cookie.post("/v1/session", json={"key": deployment.team_b}).status_code == 204
    assert auth.COOKIE in team_b_cookie.cookies
    # No key, a forged one (well formed, another's prefix), a revoked one, a key in the wrong scheme.
    prefix = deployment.team_a[len("crk_"):].partition("_")[0]
    bad_keys = {"no key": {}, "forged": {"Authorization": f"Bearer crk_{prefix}_{'A' * 32}"},
                "revoked": {"Authorization": f"Bearer {revoked}"},
                "basic scheme": {"Authorization": f"Basic {deployment.team_a}"}}
    unauthenticated = {what: httpx.Client(base_url=server.url, timeout=PROBE_TIMEOUT, headers=headers)
                       for what, headers in bad_keys.items()}
    failures: list[str] = []
    counts = {"team_b": 0, "unauthenticated": 0}
    try:
        for probe in all_probes:
            for how, client in (("header", team_b_header), ("cookie", team_b_cookie)):
                response = probe.send(client)
                counts["team_b"] += 1
                if response.status_code != 404:
                    failures.append(f"team_b ({how}) {probe.label}: {response.status_code} {response.text[:200]}")
                elif not isinstance(response.json().get("error"), str):
                    failures.append(f"team_b ({how}) {probe.label}: 404 not in the error format: {response.text}")
                if leaked := secrets.leaks(haystack(response)):
                    failures.append(f"team_b ({how}) {probe.label}: leaks {leaked[:3]}")
        for i, probe in enumerate(all_probes):
            if i % 3:  # every third probe, under each kind of bad key: they all stop at the same check
                continue
            for what, anon in unauthenticated.items():
                response = probe.send(anon)
                counts["unauthenticated"] += 1
                if response.status_code != 401:
                    failures.append(f"{what} {probe.label}: {response.status_code} {response.text[:200]}")
                if leaked := secrets.leaks(haystack(response)):
                    failures.append(f"{what} {probe.label}: leaks {leaked[:3]}")
    finally:
        for client in (team_b_header, team_b_cookie, *unauthenticated.values()):
            client.close()
    print(f"isolation probes: {counts}")
    assert not failures, f"{len(failures)} of {sum(counts.values())} probes failed:\n" + "\n".join(failures[:40])
    assert counts["team_b"] >= 200 and counts["unauthenticated"] >= 200, counts

    # Nothing a probe sent was written: the same documents, byte for byte, and no new collection.
    assert state(deployment) == before


def test_another_collections_key_answers_only_from_its_own(deployment: Deployment, secrets: Secrets) -> None:
    with deployment.server.client(deployment.team_b) as c:
        listed = c.get("/v1/collections")
        assert listed.status_code == 200
        assert [n["name"] for n in listed.json()["collections"]] == ["other"]
        assert secrets.leaks(haystack(listed)) == []
        own = texts(c, "other")
        # A line both chapters share (a heading, the licence) is the other collection's text as much as default's.
        shared = set().union(*(long_lines(t) for t in own.values()))
        private = Secrets(secrets.lines - shared, {n for n in secrets.names if not any(n in t for t in own.values())})
        assert len(private.lines) > 200
        own_ids = {d["id"] for d in c.get("/v1/collections/other/documents").json()["documents"]}
        cited = 0
        for question in SECRET_QUESTIONS:
            for mode in ("dense", "bm25", "hybrid"):
                response = c.post("/v1/collections/other/search", json={"query": question, "mode": mode, "k": 20})
                assert response.status_code == 200, response.text
                results = response.json()["results"]
                assert all(r["document_id"] in own_ids and r["document_name"] in own for r in results), results
                assert all(r["href"].startswith("/v1/collections/other/") for r in results)
                assert private.leaks(haystack(response)) == [], (question, mode)
                cited += len(results)
            for stream in (False, True):
                body = {"question": question, "stream": stream, "threshold": 2.0}  # no refusal: it must cite
                response = c.post("/v1/collections/other/ask", json=body)
                assert response.status_code == 200, response.text
                assert private.leaks(haystack(response)) == [], (question, stream)
                events = _events(response.text) if stream else [("final", response.json())]
                finals = [data for kind, data in events if kind == "final"]
                assert len(finals) == 1, events
                citations = finals[0]["citations"] + [data for kind, data in events if kind == "citation"]
                for citation in citations:
                    assert citation["document_id"] in own_ids and citation["document_name"] in own, citation
                    assert citation["href"].startswith("/v1/collections/other/"), citation
                cited += len(citations)
    assert cited > 0  # it did answer from its own chapter: the check above was not vacuous


def _events(text: str) -> list[tuple[str, Any]]:
    out = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            out.append((fields["event"], json.loads(fields.get("data", "null"))))
    return out


def test_a_reader_sees_the_collection_but_may_not_change_it(
        deployment: Deployment, default_docs: dict[int, str], default_files: dict[str, bytes],
        secrets: Secrets) -> None:
    """A 403, not a 404, on every write route (it can see the collection); a 200 on every read route. Its reads
    also show that the leak check sees default's text where it is allowed to be."""
    ids = sorted(default_docs)
    with deployment.server.client(deployment.reader_a) as c:
        before = snapshot(c, "default")
        seen = {"read": 0, "write": 0, "admin": 0}
        leaking = set()
        for method, path, route in collection_routes(deployment):
            scope = _scope(route)
            assert scope is not None
            doc_ids: list[int | None] = list(ids) if "document_id" in route.param_convertors else [None]
            for doc_id in doc_ids:
                # The reader's own conversation, a new one per route (a DELETE would end a shared one).
                cid = start_conversation(deployment, deployment.reader_a) \
                    if "conversation_id" in route.param_convertors else None
                tid = answer_trace(deployment, deployment.reader_a) if "trace_id" in route.param_convertors else None
                url = path.format(name="default", document_id=doc_id, conversation_id=cid, trace_id=tid, source=SOURCE)
                doc_name = default_docs.get(doc_id) if doc_id is not None else None
                label, kwargs = next(_bodies(route, doc_name, default_files))
                query = _queries(route, ids)[0]
                response = c.request(method, url, **kwargs, params=query or None)
                expected = (204 if method == "DELETE" else 200) if scope == "read" else 403
                assert response.status_code == expected, (method, url, label, response.status_code, response.text)
                if scope != "read":
                    assert response.json()["error"], response.text
                elif secrets.leaks(haystack(response)):
                    leaking.add(path.rsplit("/", 1)[-1])
                seen[scope] += 1
        assert seen["read"] >= 10 and seen["write"] >= 10 and seen["admin"] >= 1, seen
        # The detector works: the text, the search, the answer and the listing show default's lines or names.
        assert {"text", "search", "ask", "documents"} <= leaking, leaking
        assert snapshot(c, "default") == before
