"""The trace store's contract, the same tests on both backends: INDEX/traces.sqlite3 and the `traces` table of a
real PostgreSQL (one table for every collection). Bounded to the newest `keep`, a kept trace is never overwritten,
a collection sees only its own traces, the text only when given, and reading creates nothing; a collection on a
PostgreSQL store keeps its traces in that database, through the store's own pool."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trace_fixtures import NOTES_V1, open_app

from citerag.backends import open_backend
from citerag.errors import CiteragError
from citerag.settings import Settings
from citerag.store.base import Store
from citerag.trace import OPERATION
from citerag.trace.base import TraceStore
from citerag.trace.store import root_span, spans_named
from citerag.trace.store_sqlite import FILE_NAME, SqliteTraceStore

QUESTION = "When does the ferry to Quillby Island leave?"
ANSWER = "At noon, from pier seven [1]."


def operation(name: str = "search", hits: tuple[int, ...] = (7, 3)) -> list[ReadableSpan]:
    """One operation's spans as the collector hands them over: children first, the operation's own span last.
    A provider of its own, so that no collector of the test process sees them."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(f"citerag.{name}", attributes={OPERATION: name}), \
            tracer.start_as_current_span("citerag.dense", attributes={"citerag.hits.chunk_ids": hits}):
        pass
    spans = list(exporter.get_finished_spans())
    assert spans[-1].name == f"citerag.{name}"
    return spans


def open_trace_store(settings: Settings, store: Store | None = None) -> TraceStore | None:
    """The collection's trace store, as its backend bundle makes it."""
    return open_backend(settings).traces(settings, store)


@dataclass
class Backend:
    """`make(collection, keep)` opens one collection's trace store (as another process would: a new object on
    the same rows); `raw()` is everything the backend holds, as text."""

    name: str
    make: Callable[..., TraceStore]
    raw: Callable[[], str]


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend(request.param, request, tmp_path)


@pytest.fixture()
def pg_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from _backend("postgresql", request, tmp_path)


def _backend(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    opened: list[TraceStore] = []
    if name == "sqlite":
        def make(collection: str = "default", keep: int = 100) -> TraceStore:
            store = open_trace_store(Settings(index_dir=tmp_path / collection, trace_keep=keep))
            assert isinstance(store, SqliteTraceStore)
            (tmp_path / collection).mkdir(exist_ok=True)  # the sqlite store's folder exists before its traces
            return store

        def raw() -> str:  # the file and its -wal (WAL mode: the last commits may be only there)
            return "".join(p.read_bytes().decode("utf-8", "replace") for p in sorted(tmp_path.rglob(FILE_NAME + "*")))
    else:
        import psycopg

        url = request.getfixturevalue("pg_url")

        def make(collection: str = "default", keep: int = 100) -> TraceStore:
            # What the PostgreSQL store does on opening a collection: the schema, then the collection's row.
            store = open_trace_store(Settings(index_dir=tmp_path, store_url=url, collection=collection,
                                              trace_keep=keep))
            assert store is not None
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("INSERT INTO collections (name) VALUES (%s) ON CONFLICT DO NOTHING", (collection,))
            opened.append(store)
            return store

        def raw() -> str:
            with psycopg.connect(url) as conn:
                return "".join(r[0] for r in conn.execute("SELECT record::text FROM traces ORDER BY seq"))

    yield Backend(name, make, raw)
    for store in opened:
        store.close()


def test_the_newest_keep_are_kept(backend: Backend) -> None:
    store = backend.make(keep=3)
    ids = [store.write(operation(hits=(n,)), {"k": 20, "mode": "dense"}, "default") for n in range(5)]
    assert len(set(ids)) == 5 and all(len(i) == 32 for i in ids)
    assert store.count() == 3
    assert [store.get(i) is None for i in ids] == [True, True, False, False, False]
    record = store.get(ids[-1])
    assert record is not None and record["trace_id"] == ids[-1] and record["operation"] == "search"
    assert record["collection"] == "default" and record["options"] == {"k": 20, "mode": "dense"}
    assert record["text_kept"] is False and "question" not in record
    assert [s["name"] for s in record["spans"]] == ["citerag.search", "citerag.dense"]  # by start time
    assert root_span(record)["parent_id"] is None
    dense = spans_named(record, "citerag.dense")[0]
    assert dense["attributes"]["citerag.hits.chunk_ids"] == [4] and dense["parent_id"] == record["spans"][0]["span_id"]
    assert backend.make(keep=3).get(ids[-1].upper()) == record  # another process; ids in either case


def test_a_kept_trace_is_never_overwritten(backend: Backend) -> None:
    # Trace ids are the server's, but a store must not trust that: a later operation under a kept id (a client
    # once chose it with a traceparent) is refused, and the kept record neither changes nor becomes the newest.
    store = backend.make(keep=3)
    spans = [operation(hits=(n,)) for n in range(3)]
    first = store.write(spans[0], {"k": 1}, "default")
    second = store.write(spans[1], {}, "default")
    with pytest.raises(CiteragError, match="already kept"):
        store.write(spans[0], {"again": True}, "default", {"question": QUESTION, "answer": ANSWER})
    with pytest.raises(CiteragError, match="already kept"):
        store.write(spans[0], {}, "default")
    kept = store.get(first)
    assert kept is not None and kept["options"] == {"k": 1} and kept["text_kept"] is False
    assert QUESTION not in backend.raw()
    assert store.count() == 2
    third = store.write(spans[2], {}, "default")
    store.write(operation(), {}, "default")  # the fourth pushes out the oldest: still the first, never bumped
    assert store.get(first) is None and store.get(second) is not None and store.get(third) is not None


def test_text_is_kept_only_when_given(backend: Backend) -> None:
    store = backend.make()
    hidden = store.write(operation("ask"), {}, "default")
    shown = store.write(operation("ask"), {}, "default", {"question": QUESTION, "answer": ANSWER})
    assert QUESTION in backend.raw()  # the store does keep what it is given...
    record = store.get(hidden)
    assert record is not None and record["text_kept"] is False and "question" not in record
    kept = store.get(shown)
    assert kept is not None and kept["text_kept"] is True
    assert (kept["question"], kept["answer"]) == (QUESTION, ANSWER)
    assert all(QUESTION not in str(s["attributes"]) for s in kept["spans"])


def test_a_collection_sees_only_its_own_traces(backend: Backend) -> None:
    a, b = backend.make("team-a", keep=2), backend.make("team-b", keep=2)
    mine = [a.write(operation(), {}, "team-a") for _ in range(3)]
    theirs = b.write(operation(), {}, "team-b")
    assert (a.count(), b.count()) == (2, 1)  # a's pruning left b's row alone
    assert b.get(mine[-1]) is None and a.get(theirs) is None
    record = b.get(theirs)
    assert record is not None and record["collection"] == "team-b"


def _feedback_rows(backend: Backend, tmp_path: Path, request: pytest.FixtureRequest) -> int:
    """Every feedback row the backend holds, for any trace (orphans included)."""
    if backend.name == "sqlite":
        return sum(sqlite3.connect(p).execute("SELECT COUNT(*) FROM feedback").fetchone()[0]
                   for p in tmp_path.rglob(FILE_NAME))
    import psycopg

    with psycopg.connect(request.getfixturevalue("pg_url")) as conn:
        found = conn.execute("SELECT COUNT(*) FROM feedback").fetchone()
    return int(found[0]) if found else 0


def test_feedback_is_kept_with_its_trace_and_goes_with_it(backend: Backend, tmp_path: Path,
                                                          request: pytest.FixtureRequest) -> None:
    a, b = backend.make("team-a", keep=2), backend.make("team-b", keep=2)
    asked = a.write(operation("ask"), {}, "team-a")
    assert a.add_feedback(asked, {"helpful": False, "none_right": True, "comment": "wrong\x00 page"}) == 1
    assert a.add_feedback(asked.upper(), {"helpful": True, "source": 2}) == 2
    record = backend.make("team-a", keep=2).get(asked)  # as another process reads it
    assert record is not None and [f["helpful"] for f in record["feedback"]] == [False, True]
    assert record["feedback"][0]["comment"] in ("wrong\x00 page", "wrong\ufffd page")  # JSONB refuses U+0000
    assert record["feedback"][1]["source"] == 2
    assert "feedback" not in (a.get(a.write(operation("ask"), {}, "team-a")) or {"feedback": 1})  # none given: no key
    # No such trace, or another collection's: nothing kept.
    assert a.add_feedback("0" * 32, {"helpful": True}) is None and b.add_feedback(asked, {"helpful": True}) is None
    assert _feedback_rows(backend, tmp_path, request) == 2
    for _ in range(2):  # the trace pruned: its feedback with it
        a.write(operation("ask"), {}, "team-a")
    assert a.get(asked) is None and a.add_feedback(asked, {"helpful": True}) is None
    assert _feedback_rows(backend, tmp_path, request) == 0


def test_answers_lists_kept_answers_with_their_text_newest_first(backend: Backend) -> None:
    store, other = backend.make("team-a"), backend.make("team-b")
    first = store.write(operation("ask"), {}, "team-a", {"question": QUESTION, "answer": ANSWER})
    store.write(operation("search"), {}, "team-a", {"question": "ferry"})  # a search: not an answer
    store.write(operation("ask"), {}, "team-a")  # no text kept: nothing to label
    second = store.write(operation("ask"), {}, "team-a", {"question": "Who keeps the lighthouse?", "answer": ""})
    other.write(operation("ask"), {}, "team-b", {"question": QUESTION, "answer": ANSWER})
    store.add_feedback(first, {"helpful": True, "source": 1})
    found = backend.make("team-a").answers()
    assert [r["trace_id"] for r in found] == [second, first]
    assert found[1]["question"] == QUESTION and found[1]["feedback"] == [{"helpful": True, "source": 1}]
    assert "feedback" not in found[0]
    assert store.answers(limit=1) == found[:1] and store.answers(since=4e9) == []


def test_reading_creates_nothing(backend: Backend) -> None:
    store = backend.make()
    assert store.get("0" * 32) is None and store.count() == 0
    assert backend.raw() == ""


def test_trace_keep_0_keeps_no_store(tmp_path: Path) -> None:
    assert open_trace_store(Settings(index_dir=tmp_path, trace_keep=0)) is None
    assert open_trace_store(Settings(index_dir=tmp_path, store_url="postgresql://nowhere:1/x", trace_keep=0)) is None
    assert not list(tmp_path.iterdir())


def test_postgresql_borrows_the_stores_pool_and_collection(pg_url: str, tmp_path: Path) -> None:
    from citerag.trace.store_postgres import PostgresTraceStore

    settings = Settings(index_dir=tmp_path, store_url=pg_url, collection="team")
    backend = open_backend(settings)
    store = backend.store(settings, create=True)
    traces = backend.traces(settings, store)
    pool, collection_id = store.pool, store.collection_id  # type: ignore[attr-defined]  # a PostgresStore's
    assert isinstance(traces, PostgresTraceStore) and traces.pool is pool and traces.collection_id == collection_id
    written = traces.write(operation(), {}, "team")
    traces.close()  # borrowed: the store's pool stays open
    assert not pool.closed and traces.get(written) is not None
    store.close()


def test_postgresql_keeps_nothing_until_the_collection_exists(pg_url: str, tmp_path: Path) -> None:
    import psycopg

    traces = open_trace_store(Settings(index_dir=tmp_path, store_url=pg_url, collection="later"))
    assert traces is not None
    lost = traces.write(operation(), {}, "later")  # no row for "later" yet: skipped, not an error
    assert traces.get(lost) is None and traces.count() == 0
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO collections (name) VALUES ('later')")
    kept = traces.write(operation(), {}, "later")
    assert traces.get(kept) is not None and traces.count() == 1
    traces.close()


def test_postgresql_keeps_a_question_with_a_nul_character(pg_backend: Backend) -> None:
    store = pg_backend.make()  # JSONB refuses U+0000; SQLite keeps the text as it is
    kept = store.get(store.write(operation("ask"), {}, "default", {"question": "a\x00b", "answer": ""}))
    assert kept is not None and kept["question"] == "a\ufffdb"


def test_postgresql_writers_in_parallel_stay_bounded(pg_backend: Backend) -> None:
    keep, writers, each = 10, 4, 15
    stores = [pg_backend.make(keep=keep) for _ in range(writers)]  # four API processes
    failures: list[BaseException] = []

    def write(store: TraceStore) -> None:
        try:
            for _ in range(each):
                store.write(operation(), {}, "default")
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    # A writer that finds another pruning skips its own prune: at most one row per such writer over the bound,
    # until the next write prunes.
    assert keep <= stores[0].count() <= keep + writers - 1
    stores[0].write(operation(), {}, "default")
    assert stores[0].count() == keep


def test_a_postgresql_collection_keeps_its_traces_in_its_database(pg_url: str, tmp_path: Path,
                                                                   exported: InMemorySpanExporter) -> None:
    from citerag.ingest.files import Source
    from citerag.trace.store_postgres import PostgresTraceStore

    with open_app(tmp_path / "index", store_url=pg_url, trace_keep=3) as app:
        assert app.index_document(Source("notes.md", NOTES_V1.encode())).status == "indexed"
        ids = [app.search(f"ferry {n}").trace_id for n in range(4)]
        collection = app.collection()
        assert isinstance(collection.traces, PostgresTraceStore)
        assert collection.traces.pool is collection.store.pool  # type: ignore[attr-defined]  # borrowed
        assert collection.traces.count() == 3 and collection.trace(ids[0]) is None  # type: ignore[arg-type]
        record = collection.trace(ids[-1])  # type: ignore[arg-type]
        assert record is not None and record["operation"] == "search" and record["collection"] == "default"
    assert not (tmp_path / "index" / FILE_NAME).exists()
