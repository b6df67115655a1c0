"""Traces in INDEX/traces.sqlite3, beside a sqlite:/// store: one collection per file. See citerag.trace.base;
written off the request path by the store's writer thread (citerag.trace.writer), through one connection it
holds while it has work.

The file is in WAL mode with synchronous = NORMAL, on the writer's connection. A commit then appends to the -wal
without waiting for the disk (the -wal is synced at each checkpoint, every WAL_CHECKPOINT_PAGES), so a batch
costs no fsync. What that gives up is durability of the last commits against a power loss or an OS crash: those
traces may be missing afterwards, the file never corrupt (WAL's guarantee under NORMAL). A crash of the process
alone (SIGKILL) loses nothing committed: the -wal is in the OS's hands. Traces are diagnostics, bounded anyway by
`trace_keep`; documents and answers live in the store (INDEX/index.sqlite3), whose durability is its own and
never waits on this file.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

from opentelemetry.sdk.trace import ReadableSpan

from citerag.errors import StoreUnavailable, first_line
from citerag.trace.base import TraceRow, with_feedback
from citerag.trace.writer import Pending, TraceWriter

FILE_NAME = "traces.sqlite3"
BUSY_TIMEOUT_S = 10
# A small -wal (the default is 1000 pages, 4 MB): checkpointed, and cut back to at most WAL_LIMIT_BYTES, after
# this many pages, so that the traces never hold much of a small disk the store needs.
WAL_CHECKPOINT_PAGES = 200
WAL_LIMIT_BYTES = 1 << 20
_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL UNIQUE,
    operation TEXT NOT NULL,
    started REAL NOT NULL,
    record TEXT NOT NULL
)"""
# Feedback on an answer goes with its trace: the writer's connection deletes with foreign keys on.
_FEEDBACK_SCHEMA = ("""
CREATE TABLE IF NOT EXISTS feedback (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL REFERENCES traces (trace_id) ON DELETE CASCADE,
    record TEXT NOT NULL
)""", "CREATE INDEX IF NOT EXISTS feedback_by_trace ON feedback (trace_id)")


def _on_read_only_mount(folder: Path) -> bool:
    """Whether `folder` is on a file system mounted read-only (file permissions do not stop root; a mount does)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


class _Connection:
    """The writer thread's connection (citerag.trace.writer.RowSink): opened, creating the file, by the first
    batch of the thread, closed when the thread ends."""

    def __init__(self, path: Path, keep: int) -> None:
        self.keep = keep
        try:
            self.db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open the traces at {path}: {first_line(exc)}") from exc
        try:
            self.db.execute("PRAGMA synchronous = NORMAL")
            self.db.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
            self.db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
            # A property of the file, kept from then on; another process reading a file still in the rollback
            # journal (an older citerag) may refuse the switch for now: the next connection tries again.
            with suppress(sqlite3.OperationalError):
                self.db.execute("PRAGMA journal_mode = WAL")
            self.db.execute("PRAGMA foreign_keys = ON")
            for statement in (_SCHEMA, *_FEEDBACK_SCHEMA):
                self.db.execute(statement)
        except sqlite3.Error as exc:
            self.db.close()
            raise StoreUnavailable(f"cannot open the traces at {path}: {first_line(exc)}") from exc
        self.path = path

    def write(self, rows: Sequence[TraceRow]) -> list[bool]:
        added: list[bool] = []
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    # Insert only: a kept trace is never replaced (nor made the newest) by a later one under its id.
                    # NOT EXISTS rather than ON CONFLICT DO NOTHING, which takes a seq even when it inserts nothing.
                    cursor = self.db.execute(
                        "INSERT INTO traces (trace_id, operation, started, record) SELECT ?, ?, ?, ?"
                        " WHERE NOT EXISTS (SELECT 1 FROM traces WHERE trace_id = ?)",
                        (row.trace_id, row.operation, row.started, json.dumps(row.record, ensure_ascii=False),
                         row.trace_id))
                    added.append(cursor.rowcount == 1)
                if any(added):
                    # seq has no gaps (every insert that took a number committed it, or rolled back with it), so
                    # the newest `keep` are the last `keep` numbers: found in the primary key, never by walking
                    # `keep` rows (whose records fill a page each: milliseconds per batch at 10,000).
                    self.db.execute("DELETE FROM traces WHERE seq <= (SELECT MAX(seq) FROM traces) - ?", (self.keep,))
                self.db.execute("COMMIT")
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:  # a full or read-only disk, a lock held too long: the whole batch
            raise StoreUnavailable(f"cannot write the traces at {self.path}: {first_line(exc)}") from exc
        return added

    def close(self) -> None:
        self.db.close()  # the last connection to the file checkpoints it and removes the -wal


class SqliteTraceStore:
    def __init__(self, path: Path, keep: int) -> None:
        self.path = path
        self.keep = keep
        self.writer = TraceWriter(lambda: _Connection(self.path, self.keep), str(path))

    def submit(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
               texts: dict[str, str] | None = None) -> None:
        self.writer.submit(Pending(spans, options, collection, texts))

    def write(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
              texts: dict[str, str] | None = None) -> str:
        item = Pending(spans, options, collection, texts)
        self.writer.write(item)
        return item.trace_id

    def flush(self, timeout: float | None = None) -> bool:
        return self.writer.flush() if timeout is None else self.writer.flush(timeout)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection | None]:
        """A connection that reads the file without creating it (None when there is no file). Read-write where the
        file system is (closing it, the last connection, then checkpoints and removes the -wal as a writer does);
        on a read-only mount, immutable when every commit is in the file, else through the -wal and -shm left."""
        if not self.path.is_file():
            yield None
            return
        uri = f"file:{quote(str(self.path))}"
        if _on_read_only_mount(self.path.parent):
            wal, shm = (self.path.with_name(self.path.name + suffix) for suffix in ("-wal", "-shm"))
            if wal.exists() and wal.stat().st_size > 0:
                if not shm.exists():  # what SQLite cannot read there: the traces of a writer cut off
                    yield None
                    return
                uri += "?mode=ro"
            else:
                uri += "?immutable=1"
        else:
            uri += "?mode=rw"  # never creates the file (it may have gone since the check above)
        try:
            db = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S)
        except sqlite3.OperationalError:  # gone meanwhile
            yield None
            return
        try:
            yield db
        finally:
            db.close()

    def get(self, trace_id: str) -> dict[str, Any] | None:
        self.flush()  # a trace this process just ended is readable right away
        with self._reading() as db:
            if db is None:
                return None
            try:
                row = db.execute("SELECT record FROM traces WHERE trace_id = ?", (trace_id.lower(),)).fetchone()
            except sqlite3.OperationalError:  # no table yet
                return None
            if row is None:
                return None
            try:
                given = db.execute("SELECT record FROM feedback WHERE trace_id = ? ORDER BY seq",
                                   (trace_id.lower(),)).fetchall()
            except sqlite3.OperationalError:  # a file from before feedback: none given
                given = []
        record: dict[str, Any] = json.loads(row[0])
        if given:
            record["feedback"] = [json.loads(r[0]) for r in given]
        return record

    def answers(self, since: float = 0.0, limit: int = 10_000, text_only: bool = True) -> list[dict[str, Any]]:
        self.flush()
        with self._reading() as db:
            if db is None:
                return []
            try:
                rows = db.execute("SELECT record FROM traces WHERE operation = 'ask' AND started >= ?"
                                  " ORDER BY seq DESC LIMIT ?", (since, limit)).fetchall()
                given = db.execute("SELECT trace_id, record FROM feedback ORDER BY seq").fetchall()
            except sqlite3.OperationalError:  # no table yet (or a file from before feedback)
                return []
        return with_feedback([json.loads(r[0]) for r in rows], [(t, json.loads(f)) for t, f in given], text_only)

    def add_feedback(self, trace_id: str, feedback: dict[str, Any]) -> int | None:
        self.flush()  # the answer's own trace may still be queued
        if not self.path.is_file():
            return None
        try:
            db = sqlite3.connect(f"file:{quote(str(self.path))}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S,
                                 isolation_level=None)
        except sqlite3.OperationalError:  # gone meanwhile
            return None
        try:
            for statement in _FEEDBACK_SCHEMA:
                db.execute(statement)
            db.execute("BEGIN IMMEDIATE")  # the writer's prune waits: the trace found below is still there
            try:
                if db.execute("SELECT 1 FROM traces WHERE trace_id = ?", (trace_id.lower(),)).fetchone() is None:
                    return None
                db.execute("INSERT INTO feedback (trace_id, record) VALUES (?, ?)",
                           (trace_id.lower(), json.dumps(feedback, ensure_ascii=False)))
                count = int(db.execute("SELECT COUNT(*) FROM feedback WHERE trace_id = ?",
                                       (trace_id.lower(),)).fetchone()[0])
                db.execute("COMMIT")
                return count
            finally:
                if db.in_transaction:
                    db.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:  # a full or read-only disk, a lock held too long
            raise StoreUnavailable(f"cannot keep the feedback in {self.path}: {first_line(exc)}") from exc
        finally:
            db.close()

    def count(self) -> int:
        self.flush()
        with self._reading() as db:
            if db is None:
                return 0
            try:
                return int(db.execute("SELECT COUNT(*) FROM traces").fetchone()[0])
            except sqlite3.OperationalError:  # no table yet
                return 0

    def close(self) -> None:
        self.writer.close()  # what is queued is written first
