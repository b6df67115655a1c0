"""The OpenAPI schema fuzzed with schemathesis against live servers: no request gets a 5xx (or a dropped
connection), every 4xx is the server's error format, JSON `{"error": "...", "field": ...}` (a field's name or
"body", never a character offset; null only for errors about no field), and every response carries X-Trace-Id and
the security headers.

Three runs: the shared deployment with the server admin key (reaches every handler) and with team_b's key (another
collection's: mostly the 404 path), both on the operations that change nothing, so the other tests' fixture stays
as it is; and a server of this module's own (three collections of three short notes) where every operation is
fuzzed, the deletes last, plus uploads in every format the server reads with broken contents. Generation is
derandomized (the same requests on every run) and bounded so the file runs in about a minute on two cores.

schemathesis' pytest plugin (`from_fixture(...).parametrize()`) fails under pytest 9 (`request.node._nodeid`), so
the operations are parametrized here and each one is driven through schemathesis' Python API: its coverage cases,
then Hypothesis over `operation.as_strategy()` in positive and negative mode, each response checked by
`not_a_server_error` and by `error_format` below.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from live import LiveServer, live_server, wait_settled
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.core.transport import Response
from service_fixtures import Deployment

from citerag.extract import supported_suffixes
from citerag.keystore.sqlite import SqliteKeyStore
from citerag.service.app import create_app
from citerag.settings import Settings
from corpus_paths import DATA

# Every operation of the API as this code defines it (no server needed): one test per operation and run.
_SPEC = create_app(Settings(index_dir=Path("/nonexistent/citerag-fuzz"))).openapi()
LABELS = [f"{method.upper()} {path}" for path, ops in _SPEC["paths"].items() for method in ops]
# What changes a server: fuzzed only on this module's own server, never on the shared deployment.
WRITES = re.compile(r"^(POST /v1/collections|DELETE /v1/collections/.*|PUT .*|POST .*/documents|POST .*/retry"
                    r"|POST .*/feedback|POST .*/labels|POST .*/sources.*)$")
DELETES = re.compile(r"^DELETE /v1/collections/")
READS = [label for label in LABELS if not WRITES.match(label)]
SEED = 20250417
REQUEST_TIMEOUT = 30  # seconds; an answer on a slow CI machine
# Hypothesis examples per operation and generation mode (positive, negative), besides the coverage cases; and
# upload examples (1-3 files each). About 2,500 requests: a minute on two cores.
ADMIN_EXAMPLES, TEAM_B_EXAMPLES, OWN_EXAMPLES, UPLOAD_EXAMPLES = 25, 10, 25, 20


def fuzz_settings(max_examples: int) -> settings:
    """Derandomized: the same requests on every run, so that CI is reproducible. Not shrunk: the server keeps
    state (a shrunk case may create what the failing one then finds, a 409), so the first failure is reported as
    it was sent, with its curl command."""
    return settings(max_examples=max_examples, derandomize=True, database=None, deadline=None, print_blob=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])


@dataclass
class Run:
    """One fuzzing run: a server, a key, what the path parameters may be, and how much to send."""

    name: str
    server: LiveServer
    key: str
    names: list[str]  # collections that exist there
    docs: list[tuple[str, int]]  # (collection, document id) of documents that exist there
    max_examples: int  # per operation and generation mode (positive, negative)
    coverage: bool  # also schemathesis' deterministic coverage cases (boundaries, missing fields, other methods)

    @property
    def ids(self) -> list[int]:
        return sorted({i for _, i in self.docs})


TALLY: dict[str, Counter[int]] = {}  # "run label" -> status codes seen


SECURITY_HEADERS = {"x-content-type-options": "nosniff", "referrer-policy": "no-referrer", "x-frame-options": "DENY"}
NAMES_A_FIELD = (400, 413, 422)  # what the client sent is wrong: its field, or "body" for the body as a whole


def _header(response: Response, name: str) -> str:
    values = {k.lower(): v for k, v in response.headers.items()}.get(name, [""])
    return values[0] if values else ""


def error_format(ctx: Any, response: Response, case: schemathesis.Case) -> bool | None:
    """Every response carries X-Trace-Id and the security headers. Every 4xx is the server's error format: JSON with
    an "error" string and a "field": a field's name, or "body" for a body that cannot be read, never a character
    offset; null only for an error about no field (401, 403, 404, 405, 409, 429). A 400, 413 or 422 names one."""
    assert re.fullmatch(r"[0-9a-f]{32}", _header(response, "x-trace-id")), response.headers
    assert _header(response, "content-security-policy"), response.headers
    for name, value in SECURITY_HEADERS.items():
        assert _header(response, name) == value, (name, response.headers)
    if not 400 <= response.status_code < 500:
        return None
    try:
        data = response.json()
    except ValueError:
        raise AssertionError(f"{response.status_code} body is not JSON: {response.text[:200]!r}") from None
    assert isinstance(data, dict) and set(data) == {"error", "field"}, data
    assert isinstance(data["error"], str) and data["error"], data
    field = data["field"]
    assert field is None or (isinstance(field, str) and field and not field.isdigit()), data  # never an offset
    if response.status_code in NAMES_A_FIELD:
        assert isinstance(field, str), data
    content_type = _header(response, "content-type")
    assert content_type.startswith("application/json"), content_type
    return None


def load(run: Run) -> schemathesis.BaseSchema:
    """The schema the live server serves."""
    config = schemathesis.Config.from_dict({"seed": SEED, "request-timeout": REQUEST_TIMEOUT,
                                            "max-stream-events": 50})
    schema = schemathesis.openapi.from_url(f"{run.server.url}/openapi.json", config=config)
    # Traces that exist (a search in each collection the key sees), for GET /v1/traces/{trace_id}.
    with run.server.client(run.key) as c:
        traces = [r.headers["X-Trace-Id"] for r in (c.post(f"/v1/collections/{n}/search", json={"query": "locale"})
                                                     for n in run.names) if r.status_code == 200]
        # A conversation of this key in each collection, for the routes of /conversations/{conversation_id}.
        started = [(n, c.post(f"/v1/collections/{n}/conversations", json={"question": "locale"})) for n in run.names]
        talks = [(n, r.json()["conversation_id"]) for n, r in started if r.status_code == 200]
        # An answer in each collection, for feedback on it (its path) and a label of it (its body).
        asked = [(n, c.post(f"/v1/collections/{n}/ask", json={"question": "fuzzing"})) for n in run.names]
        answers = [(n, r.json()["trace_id"]) for n, r in asked if r.status_code == 200]
        # A source in each collection the key administers (a website on a closed port, never synced), for the
        # routes of /sources/{source}: the shared deployment's default has one; the module's own server gets one.
        named: list[tuple[str, str]] = []
        for n in run.names:
            listed = c.get(f"/v1/collections/{n}/sources")
            if listed.status_code == 200 and not listed.json()["sources"]:
                c.post(f"/v1/collections/{n}/sources", json={"name": "fuzzed", "kind": "web",
                                                               "location": "http://127.0.0.1:9/fuzzed/"})
                listed = c.get(f"/v1/collections/{n}/sources")
            if listed.status_code == 200:
                named += [(n, x["name"]) for x in listed.json()["sources"]]

    @schema.hook
    def flatmap_path_parameters(context: Any, path_parameters: Any) -> st.SearchStrategy[Any]:
        # Half the time a collection (and a document of it) that exists, so that cases reach the handlers;
        # else what was generated, alone or mixed with real values.
        if isinstance(path_parameters, dict) and {"trace_id", "name"} <= set(path_parameters) and answers:
            return st.one_of(st.sampled_from([{**path_parameters, "name": n, "trace_id": t} for n, t in answers]),
                             st.just(path_parameters))
        if isinstance(path_parameters, dict) and "trace_id" in path_parameters and traces:
            return st.one_of(st.sampled_from([{**path_parameters, "trace_id": t} for t in traces]),
                             st.just(path_parameters))
        if not isinstance(path_parameters, dict) or "name" not in path_parameters:
            return st.just(path_parameters)
        generated = dict(path_parameters)
        if "source" in generated and named:
            return st.one_of(st.sampled_from([{**generated, "name": n, "source": x} for n, x in named]),
                             st.just(generated))
        if "conversation_id" in generated:
            return st.one_of(st.sampled_from([{**generated, "name": n, "conversation_id": i} for n, i in talks]),
                             st.just(generated))
        if "document_id" in generated:
            real = [{**generated, "name": n, "document_id": i} for n, i in run.docs]
            mixed = st.fixed_dictionaries({**{k: st.just(v) for k, v in generated.items()},
                                           "name": st.sampled_from([generated["name"], *run.names]),
                                           "document_id": st.sampled_from([generated["document_id"], *run.ids])})
            return st.one_of(st.sampled_from(real), mixed)
        return st.one_of(st.sampled_from([{**generated, "name": n} for n in run.names]), st.just(generated))

    @schema.hook
    def flatmap_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
        # A label's body (the only one naming a trace): half the time an answer of "default" that exists.
        mine = [t for n, t in answers if n == "default"]
        if isinstance(body, dict) and "trace_id" in body and mine:
            return st.one_of(st.sampled_from([{"trace_id": t, "ood": True} for t in mine]), st.just(body))
        return st.just(body)

    return schema


def send(run: Run, case: schemathesis.Case) -> None:
    if case.path.endswith("/documents/events") and case.method.upper() == "GET":
        # With no ids the status feed stays open until the client leaves (by design: a live feed); name one
        # document so that it ends with `done`, else every such case costs the whole request timeout.
        query = dict(case.query or {})
        if query.get("ids") in (None, ""):
            query["ids"] = str(run.ids[0])
            case.query = query
    response = case.call(headers={"Authorization": f"Bearer {run.key}"}, timeout=REQUEST_TIMEOUT)
    TALLY.setdefault(f"{run.name} {case.operation.label}", Counter())[response.status_code] += 1
    try:
        case.validate_response(response, checks=[not_a_server_error, error_format])
    except FailureGroup as exc:  # a BaseExceptionGroup: re-raised as an AssertionError, a test failure like others
        raise AssertionError(str(exc)) from None


def fuzz(run: Run, schema: schemathesis.BaseSchema, label: str) -> None:
    operation = schema.find_operation_by_label(label)
    assert operation is not None, f"{label} is not in the schema the server serves"
    failures: list[str] = []
    if run.coverage:
        generation = schema.config.generation_for(operation=operation, phase="coverage")
        for case in schema.iter_coverage_cases(operation, generation_modes=list(GenerationMode),
                                               generation_config=generation):
            try:
                send(run, case)
            except AssertionError as exc:
                failures.append(f"coverage: {exc}")
    for mode in GenerationMode:
        @fuzz_settings(run.max_examples)
        @given(case=operation.as_strategy(generation_mode=mode))
        def one(case: schemathesis.Case) -> None:
            send(run, case)

        try:
            one()
        except AssertionError as exc:
            failures.append(f"{mode.value}: {exc}")
        except Unsatisfiable:
            # Nothing to make invalid: an operation without parameters or body has no negative cases.
            assert mode is GenerationMode.NEGATIVE and not (operation.path_parameters or operation.query
                                                            or operation.body), label
    assert not failures, f"{run.name} {label}:\n" + "\n\n".join(failures)


# --- the shared deployment, the operations that change nothing ------------------------------------------------

@pytest.fixture(scope="module")
def shared_docs(deployment: Deployment) -> list[tuple[str, int]]:
    with deployment.server.client(deployment.admin) as c:
        return [(name, d["id"]) for name in ("default", "other")
                for d in c.get(f"/v1/collections/{name}/documents").json()["documents"]]


@pytest.fixture(scope="module")
def as_admin(deployment: Deployment, shared_docs: list[tuple[str, int]]) -> tuple[Run, schemathesis.BaseSchema]:
    run = Run("admin", deployment.server, deployment.admin, ["default", "other"], shared_docs, ADMIN_EXAMPLES, True)
    return run, load(run)


@pytest.fixture(scope="module")
def as_team_b(deployment: Deployment, shared_docs: list[tuple[str, int]]) -> tuple[Run, schemathesis.BaseSchema]:
    run = Run("team_b", deployment.server, deployment.team_b, ["default", "other"], shared_docs, TEAM_B_EXAMPLES, False)
    return run, load(run)


def test_the_served_schema_is_the_one_fuzzed(as_admin: tuple[Run, schemathesis.BaseSchema]) -> None:
    served = {op.ok().label for op in as_admin[1].get_all_operations()}
    assert served == set(LABELS)


@pytest.mark.parametrize("label", READS)
def test_shared_server_as_admin(as_admin: tuple[Run, schemathesis.BaseSchema], label: str) -> None:
    fuzz(*as_admin, label)


@pytest.mark.parametrize("label", READS)
def test_shared_server_as_another_team(as_team_b: tuple[Run, schemathesis.BaseSchema], label: str) -> None:
    fuzz(*as_team_b, label)


# --- a server of this module's own: every operation, the deletes last ------------------------------------------

NOTES = {f"note-{i}.md": f"# Note {i}\n\nA short note, number {i}, about fuzzing a server.\n".encode()
         for i in range(3)}
VICTIMS = ["scratch-a", "scratch-b"]


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Run, schemathesis.BaseSchema]]:
    home = tmp_path_factory.mktemp("fuzz-home")
    admin = SqliteKeyStore(home).create(None, "admin")
    with live_server(home, trace_text=True) as server:  # questions kept, so that answers can be labelled
        with server.client(admin) as c:
            for name in VICTIMS:
                assert c.post("/v1/collections", json={"name": name}).status_code == 201
            docs: list[tuple[str, int]] = []
            for name in ("default", *VICTIMS):
                response = c.post(f"/v1/collections/{name}/documents",
                                  files=[("files", (n, data)) for n, data in NOTES.items()])
                assert response.status_code == 202, response.text
                ids = [d["id"] for d in response.json()["documents"]]
                assert all(d["status"] == "indexed" for d in wait_settled(c, name, ids))
                docs.extend((name, i) for i in ids)
        run = Run("own", server, admin, ["default", *VICTIMS], docs, OWN_EXAMPLES, True)
        yield run, load(run)


@pytest.mark.parametrize("label", [label for label in LABELS if not DELETES.match(label)])
def test_own_server_every_operation(own: tuple[Run, schemathesis.BaseSchema], label: str) -> None:
    fuzz(*own, label)


@pytest.mark.parametrize("changes", [{"target": 16}, {"target": 100, "overlap": 100}, {"overlap": 5000}])
def test_settings_that_contradict_each_other_are_a_422(own: tuple[Run, schemathesis.BaseSchema],
                                                       changes: dict[str, int]) -> None:
    """Found by the fuzzing: an overlap not below the target (a target under the default overlap, too) was a 500."""
    run = own[0]
    with run.server.client(run.key) as c:
        response = c.post("/v1/collections", json={"name": "contradiction", "settings": changes})
        assert response.status_code == 422, response.text
        assert response.json()["field"] == "settings.overlap"
        assert "overlap must be less than target" in response.json()["error"]
        assert "contradiction" not in [n["name"] for n in c.get("/v1/collections").json()["collections"]]


# Uploads the schema cannot describe: a file named for each format the server reads, its bytes random, a real
# sample cut short or with bytes overwritten, or another format's sample. The extractors run in the background;
# whatever they make of it, every route over the document then answers without a 5xx.
SAMPLES = {".pdf": "pdf-table-mtcars-3p.pdf", ".docx": "docx-python-docx-paras-tables.docx",
           ".xlsx": "xlsx-readxl-deaths-messy.xlsx", ".ods": "ods-pyexcel-formats.ods",
           ".odt": "odt-odfpy-api-manual.odt", ".epub": "epub-live-manual-en.epub", ".vtt": "vtt-youtube-dl.vtt"}
SMALL = 30_000  # bytes: only samples this small are sent whole (with bytes overwritten), to keep indexing short
TEXT = b"<h1>Title</h1>\n\n# Heading\n\nWEBVTT\n\n00:00.000 --> 00:01.000\nSome words, a;b;c\n1,2,3\n"


@st.composite
def upload_files(draw: st.DrawFn) -> tuple[str, bytes]:
    suffix = draw(st.sampled_from(supported_suffixes()))
    sample = (DATA / "samples" / SAMPLES[suffix]).read_bytes() if suffix in SAMPLES else TEXT
    other = (DATA / "samples" / draw(st.sampled_from(sorted(SAMPLES.values())))).read_bytes()
    how = draw(st.sampled_from(["random", "cut", "overwritten", "other format", "empty", "text"]))
    if how == "random":
        data = draw(st.binary(max_size=2048))
    elif how == "cut":
        data = sample[:draw(st.integers(0, min(len(sample), SMALL)))]
    elif how == "overwritten" and len(sample) <= SMALL:
        data = bytearray(sample)
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        data = bytes(data)
    elif how == "other format":
        data = other[:SMALL]
    elif how == "text":
        data = draw(st.text(max_size=500)).encode("utf-8", "surrogatepass")
    else:
        data = b""
    return suffix, data


def _check(response: httpx.Response, what: str) -> int:
    assert response.status_code < 500, f"{what}: {response.status_code} {response.text[:500]}"
    assert response.headers.get("x-content-type-options") == "nosniff", f"{what}: {response.headers}"
    if 400 <= response.status_code < 500:
        body = response.json()
        assert isinstance(body.get("error"), str) and body["error"], f"{what}: {response.text[:200]}"
        assert body["field"] is None or not body["field"].isdigit(), f"{what}: {response.text[:200]}"
    return response.status_code


def test_own_server_uploads_of_every_format(own: tuple[Run, schemathesis.BaseSchema]) -> None:
    run = own[0]
    seen: Counter[str] = Counter()
    serial = iter(range(1_000_000))
    with run.server.client(run.key) as c:
        c.timeout = httpx.Timeout(REQUEST_TIMEOUT)

        @fuzz_settings(UPLOAD_EXAMPLES)
        @given(files=st.lists(upload_files(), min_size=1, max_size=3), replacement=upload_files())
        def one(files: list[tuple[str, bytes]], replacement: tuple[str, bytes]) -> None:
            named = [(f"fuzz-{next(serial)}{suffix}", data) for suffix, data in files]
            response = c.post("/v1/collections/default/documents", files=[("files", f) for f in named])
            if _check(response, "upload") != 202:
                return
            ids = [d["id"] for d in response.json()["documents"]]
            for doc in wait_settled(c, "default", ids, timeout=120):
                seen[doc["status"]] += 1
                url = f"/v1/collections/default/documents/{doc['id']}"
                for route in ("", "/text", "/file", "/view"):
                    _check(c.get(url + route), f"GET {url}{route} ({doc['name']}, {doc['status']})")
                _check(c.post(url + "/retry"), f"retry {doc['name']}")
                suffix = "." + doc["name"].rsplit(".", 1)[-1]
                _check(c.put(url, files={"file": (f"new{suffix}", replacement[1])}), f"replace {doc['name']}")
            for question in ("What are some words?", named[0][0]):
                _check(c.post("/v1/collections/default/search", json={"query": question}), "search")
                _check(c.post("/v1/collections/default/ask", json={"question": question, "threshold": 2.0}), "ask")
            for i in ids:  # deleted while its replacement may still be queued or running
                _check(c.delete(f"/v1/collections/default/documents/{i}"), f"delete {i}")

        one()
    print(f"\nuploads fuzzed: {dict(seen)}")
    assert seen["failed"] and seen["indexed"], seen  # both kinds of outcome were reached


# Documents first (more path segments), then whole collections.
@pytest.mark.parametrize("label", sorted((label for label in LABELS if DELETES.match(label)),
                                         key=lambda label: -label.count("/")))
def test_own_server_deletes(own: tuple[Run, schemathesis.BaseSchema], label: str) -> None:
    """Last: documents, then whole collections, deleted; their ids and names fuzzed again once gone."""
    fuzz(*own, label)


def test_the_fuzzing_reached_the_handlers() -> None:
    """Not a vacuous run: each run sent cases to every one of its operations, and nearly all of them answered a 2xx
    to some case (the path parameters drawn from what exists reached the handlers)."""
    if not TALLY:
        pytest.skip("the fuzzing tests did not run (selected alone)")
    print(f"\nfuzzed: {sum(sum(c.values()) for c in TALLY.values())} requests")
    for label in sorted(TALLY):
        print(f"  {label}: {dict(sorted(TALLY[label].items()))}")
    assert not any(status >= 500 for c in TALLY.values() for status in c)
    # A write key gets a 403 on the sources and the audit trail, by design.
    admin_reads = sum("/sources" in label or "/audit" in label for label in READS)
    sign_in = sum("/v1/oidc/" in label for label in READS)  # a server without an identity provider: 404, by design
    expected = {"admin": (set(READS), len(READS) - 1 - sign_in),
                "team_b": (set(READS), len(READS) - 3 - admin_reads - sign_in),
                "own": (set(LABELS), len(LABELS) - 2 - sign_in)}
    for run, (operations, at_least) in expected.items():
        tallied = {label.split(" ", 1)[1]: c for label, c in TALLY.items() if label.startswith(run + " ")}
        if set(tallied) != operations:
            continue  # a run only partly selected (-k): nothing to say about it
        reached = {op for op, c in tallied.items() if any(200 <= status < 300 for status in c)}
        assert len(reached) >= at_least, (run, sorted(operations - reached))
