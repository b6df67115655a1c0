"""Traces off the request path (citerag.trace.writer): an operation only queues its trace, and a writer thread per
store keeps the queue in batches. A trace returned is readable right away in its process; a full queue drops
with a counted warning instead of making a request wait; close, the service's shutdown and the interpreter's exit
write what is queued; a killed process loses at most the traces it had not written, never a document, and leaves
the trace file whole; a trace that cannot be written never fails the query."""

from __future__ import annotations

import json
import logging
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_trace_store_contract import operation
from trace_fixtures import ASKED, NOTES_V1, open_app

from citerag.app.home import Citerag
from citerag.app.models import AskOptions
from citerag.ingest.files import Source
from citerag.settings import Settings
from citerag.trace import store_sqlite
from citerag.trace.base import TraceRow
from citerag.trace.store_sqlite import FILE_NAME, SqliteTraceStore
from citerag.trace.writer import Pending, TraceWriter
from fakes import HashEncoder

CHILD = Path(__file__).resolve().parent / "trace_child.py"


class Gate:
    """The SQLite writer's transactions held until `open()`: what an operation does meanwhile is not waiting on
    its trace. Records the threads that wrote."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.event = threading.Event()
        self.threads: list[str] = []
        write = store_sqlite._Connection.write

        def gated(connection: Any, rows: Sequence[TraceRow]) -> list[bool]:
            self.threads.append(threading.current_thread().name)
            assert self.event.wait(60), "the gate was never opened"
            return write(connection, rows)

        monkeypatch.setattr(store_sqlite._Connection, "write", gated)

    def open(self, after: float) -> None:
        threading.Timer(after, self.event.set).start()


def kept_elsewhere(path: Path, trace_id: str) -> bool:
    """Whether the file holds the trace, read as another process would (a store object of its own)."""
    return SqliteTraceStore(path, 100).get(trace_id) is not None


def test_an_operation_queues_its_trace_and_a_read_waits_for_it(tmp_path: Path, exported: InMemorySpanExporter,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    with open_app(tmp_path / "index") as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        app.collection().traces.flush()  # type: ignore[union-attr]
        gate = Gate(monkeypatch)
        searched = app.search("ferry pier")  # returns with its trace still held at the gate
        answer = app.ask(ASKED)
        path = tmp_path / "index" / FILE_NAME
        assert searched.trace_id and answer.trace_id and not kept_elsewhere(path, searched.trace_id)
        gate.open(after=0.2)
        record = app.collection().trace(answer.trace_id)  # waits for the queue: read your writes
        assert record is not None and record["operation"] == "ask"
        assert kept_elsewhere(path, searched.trace_id)
        assert gate.threads and all(name.startswith("citerag-traces") for name in gate.threads)
        assert threading.current_thread().name not in gate.threads


class Blocked:
    """A RowSink that keeps every row, once `release` is set."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.rows: list[str] = []
        self.batches: list[int] = []

    def write(self, rows: Sequence[TraceRow]) -> list[bool]:
        self.entered.set()
        assert self.release.wait(60)
        self.batches.append(len(rows))
        self.rows += [r.trace_id for r in rows]
        return [True] * len(rows)

    def close(self) -> None:
        pass


def pending() -> Pending:
    return Pending(operation(), {}, "default", None)


def test_a_full_queue_drops_traces_with_a_counted_warning(caplog: pytest.LogCaptureFixture) -> None:
    sink = Blocked()
    writer = TraceWriter(lambda: sink, "the test's store", limit=2)
    first = pending()
    writer.submit(first)
    assert sink.entered.wait(10)  # the writer holds the first one; two more fit in the queue
    items = [pending() for _ in range(5)]
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="citerag"):
        for item in items:
            writer.submit(item)
    assert time.monotonic() - started < 1.0  # never waited for the store
    assert writer.dropped == 3 and writer.pending == 3
    warnings = [r.getMessage() for r in caplog.records if "not kept" in r.getMessage()]
    assert len(warnings) == 1 and "2 traces already wait for the test's store (1 dropped so far)" in warnings[0]
    sink.release.set()
    assert writer.flush(10) and writer.pending == 0
    assert sink.rows == [first.trace_id, items[0].trace_id, items[1].trace_id]
    assert sink.batches == [1, 2]  # what queued meanwhile went in one transaction
    writer.close()


def test_close_writes_what_is_queued_and_a_later_trace_starts_again() -> None:
    sink = Blocked()
    writer = TraceWriter(lambda: sink, "the test's store")
    items = [pending() for _ in range(20)]
    for item in items:
        writer.submit(item)
    closing = threading.Thread(target=writer.close)
    closing.start()
    closing.join(0.3)
    assert closing.is_alive()  # close waits for the queue
    sink.release.set()
    closing.join(10)
    assert not closing.is_alive() and sink.rows == [i.trace_id for i in items]
    assert not any(t.name.startswith("citerag-traces the test's") for t in threading.enumerate())
    later = pending()
    writer.submit(later)
    assert writer.flush(10) and sink.rows[-1] == later.trace_id
    writer.close()


def test_a_store_closed_keeps_what_was_queued_and_can_be_read_again(tmp_path: Path) -> None:
    store = SqliteTraceStore(tmp_path / FILE_NAME, 100)
    spans = [operation(hits=(n,)) for n in range(50)]
    for s in spans:
        store.submit(s, {}, "default")
    store.close()
    again = SqliteTraceStore(tmp_path / FILE_NAME, 100)
    assert again.count() == 50
    assert not (tmp_path / (FILE_NAME + "-wal")).exists()  # the last connection checkpointed it
    assert store.get(again.write(operation(), {}, "default")) is not None  # closed, still usable
    again.close()


def test_a_trace_that_cannot_be_written_never_fails_the_query(tmp_path: Path, exported: InMemorySpanExporter,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    index = tmp_path / "index"
    with open_app(index) as app, caplog.at_level(logging.WARNING, logger="citerag"):
        # What SQLite cannot open, whoever runs the test (permissions do not stop root): a folder in its place.
        (index / FILE_NAME).mkdir()
        assert app.index_document(Source("notes.md", NOTES_V1.encode())).status == "indexed"
        searched = app.search("ferry pier")
        answer = app.ask(ASKED)
        assert searched.hits and answer.citations and answer.trace_id
        assert app.collection().trace(answer.trace_id) is None
        assert app.collection().traces.count() == 0  # type: ignore[union-attr]
    lost = [r.getMessage() for r in caplog.records if "not kept" in r.getMessage()]
    assert lost and all("traces.sqlite3" in line and "\n" not in line for line in lost)


def test_a_trace_file_that_turns_read_only_never_fails_the_query(tmp_path: Path, exported: InMemorySpanExporter,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    index = tmp_path / "index"
    with open_app(index) as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        kept = app.search("ferry")
        assert kept.trace_id and app.collection().trace(kept.trace_id) is not None
    # The writer's connection refused every write by SQLite itself, as on a file that became read-only.
    opened = store_sqlite._Connection.__init__

    def read_only(connection: Any, path: Path, keep: int) -> None:
        opened(connection, path, keep)
        connection.db.execute("PRAGMA query_only = ON")

    monkeypatch.setattr(store_sqlite._Connection, "__init__", read_only)
    with open_app(index) as app, caplog.at_level(logging.WARNING, logger="citerag"):
        answer = app.ask(ASKED)
        assert answer.citations and app.collection().trace(answer.trace_id) is None  # type: ignore[arg-type]
        assert app.collection().trace(kept.trace_id) is not None
    assert any("not kept" in r.getMessage() and "readonly" in r.getMessage() for r in caplog.records)


class Child:
    """trace_child.py in a process of its own; its lines as they come."""

    def __init__(self, mode: str, index: Path, count: int = 0) -> None:
        self.process = subprocess.Popen([sys.executable, str(CHILD), mode, str(index), str(count)],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[dict[str, Any]] = []

    def read(self, count: int, timeout: float = 120) -> list[dict[str, Any]]:
        assert self.process.stdout is not None
        timer = threading.Timer(timeout, self.process.kill)
        timer.start()
        try:
            while len(self.lines) < count and (line := self.process.stdout.readline()):
                self.lines.append(json.loads(line))
        finally:
            timer.cancel()
        return self.lines

    def stderr(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read()


def integrity(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return str(db.execute("PRAGMA integrity_check").fetchone()[0])


def hash_app(index: Path) -> Citerag:
    app = Citerag()
    app.register_encoder(HashEncoder())
    app.open_collection(Settings(index_dir=index, embedding_model="hash-64"), create=True)
    return app


def test_a_killed_process_loses_at_most_its_unwritten_traces(tmp_path: Path) -> None:
    """SIGKILL after 40 answers and searches, most likely inside a trace transaction: the trace file is whole, the
    traces kept are the first ones in the order the operations ended (only the unwritten tail is missing), and
    the document and the answers are as they were."""
    child_index = tmp_path / "index"
    child = Child("kill", child_index)
    try:
        lines = child.read(41)
    finally:
        child.process.send_signal(signal.SIGKILL)
        child.process.wait(30)
    assert len(lines) == 41, child.stderr()
    assert child.process.returncode == -signal.SIGKILL
    assert lines[0] == {"op": "index", "status": "indexed"}
    assert integrity(child_index / "index.sqlite3") == "ok"
    assert integrity(child_index / FILE_NAME) == "ok"
    store = SqliteTraceStore(child_index / FILE_NAME, 10000)
    ids = [line["trace_id"] for line in lines[1:]]
    kept = [i for i in ids if store.get(i) is not None]
    assert kept == ids[:len(kept)], "a trace is missing before one that was kept"
    for i in kept:
        record = store.get(i)
        assert record is not None and record["operation"] in ("ask", "search") and record["spans"]
    print(f"killed after {len(ids)} operations: {len(kept)} traces kept, the last {len(ids) - len(kept)} lost")
    with hash_app(child_index) as app:
        assert [d.status for d in app.collection().documents()] == ["indexed"]
        asked = [line for line in lines[1:] if line["op"] == "ask"]
        again = app.ask(asked[-1]["question"], AskOptions(threshold=2.0))
        assert again.answer == asked[-1]["answer"]
        text = app.collection().canonical_text(again.citations[0].document_id)
        assert all(text[c.start:c.end] == c.quote for c in again.citations)


def test_the_interpreter_s_exit_writes_what_is_queued(tmp_path: Path) -> None:
    """A process that ends without closing its store (a script, a CLI command cut short by an error): atexit
    writes every trace still queued."""
    child_index = tmp_path / "index"
    child = Child("exit", child_index, count=30)
    lines = child.read(31)
    assert child.process.wait(60) == 0, child.stderr()
    store = SqliteTraceStore(child_index / FILE_NAME, 10000)
    assert all(store.get(line["trace_id"]) is not None for line in lines[1:])
    assert store.count() == 31  # and the document's


def test_the_service_returns_before_its_trace_is_written_and_writes_it_on_shutdown(
        tmp_path: Path, exported: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    from citerag.service.app import create_app
    from citerag.service.state import ServiceConfig

    index = tmp_path / "index"
    with open_app(index) as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
    path = index / FILE_NAME
    gate = Gate(monkeypatch)
    with TestClient(create_app(Settings(index_dir=index), ServiceConfig(keys_required=False))) as client:
        searched = client.post("/v1/collections/default/search", json={"query": "ferry pier"})
        assert searched.status_code == 200, searched.text
        first = searched.headers["X-Trace-Id"]
        assert not kept_elsewhere(path, first)  # answered with the trace held at the gate
        gate.open(after=0.2)
        trace = client.get(f"/v1/traces/{first}")  # the same process: waits for the writer
        assert trace.status_code == 200 and trace.json()["operation"] == "search"
        gate.event.clear()
        second = client.post("/v1/collections/default/search", json={"query": "lighthouse lens"})
        assert second.status_code == 200
        gate.open(after=0.5)  # the shutdown below starts with the trace still held
    assert kept_elsewhere(path, second.headers["X-Trace-Id"])


def test_an_id_another_api_process_returned_opens_here(pg_url: str, tmp_path: Path, exported: InMemorySpanExporter,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Two API processes on one PostgreSQL: a trace is in the shared table once its process's writer committed it
    (not before: another process cannot wait on that queue), and GET /v1/traces/{id} looks again for a while when
    its database is shared, so that an id one process returned a moment ago opens on the other."""
    from fastapi.testclient import TestClient

    from citerag.backends import open_backend
    from citerag.service.app import create_app
    from citerag.service.routes import traces as route
    from citerag.service.state import ServiceConfig
    from citerag.trace.store_postgres import _Rows

    gate = threading.Event()
    write = _Rows.write
    monkeypatch.setattr(_Rows, "write", lambda rows, batch: gate.wait(60) and write(rows, batch))
    monkeypatch.setattr(route, "SHARED_ARRIVAL_S", 1.0)
    settings = Settings(index_dir=tmp_path / "home", store_url=pg_url)
    with TestClient(create_app(settings, ServiceConfig(keys_required=False))) as client:
        other = open_backend(settings).traces(settings)  # the other process's store: its own pool, the same rows
        assert other is not None
        spans = operation()
        other.submit(spans, {}, "default")  # its operation ended; its writer has not committed yet
        trace_id = format(spans[-1].context.trace_id, "032x")  # type: ignore[union-attr]
        assert client.app.state.service.app.collection().traces.get(trace_id) is None  # type: ignore[attr-defined]
        threading.Timer(0.3, gate.set).start()  # committed while the request below is looking
        assert client.get(f"/v1/traces/{trace_id}").json()["trace_id"] == trace_id
        assert other.get(trace_id) is not None
        started = time.monotonic()
        missing = client.get(f"/v1/traces/{'0' * 32}")  # a trace that never comes: a 404, after the wait
        assert missing.status_code == 404 and time.monotonic() - started >= 0.7
        other.close()
