"""Traces in INDEX/traces.sqlite3, beside a sqlite:/// store: one collection per file. See citerag.trace.base."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from citerag.trace.base import TraceExists, trace_row

FILE_NAME = "traces.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL UNIQUE,
    operation TEXT NOT NULL,
    started REAL NOT NULL,
    record TEXT NOT NULL
)"""


class SqliteTraceStore:
    def __init__(self, path: Path, keep: int) -> None:
        self.path = path
        self.keep = keep
        self._lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=10)
        db.execute(_SCHEMA)
        return db

    def write(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
              texts: dict[str, str] | None = None) -> str:
        row = trace_row(spans, options, collection, texts)
        with self._lock:
            db = self._connect()
            try:
                with db:  # one transaction: the row and the pruning
                    # Insert only: a kept trace is never replaced (nor made the newest) by a later one under its id.
                    added = db.execute(
                        "INSERT INTO traces (trace_id, operation, started, record) VALUES (?, ?, ?, ?)"
                        " ON CONFLICT (trace_id) DO NOTHING",
                        (row.trace_id, row.operation, row.started, json.dumps(row.record, ensure_ascii=False)))
                    if added.rowcount == 0:
                        raise TraceExists(f"trace {row.trace_id} is already kept")
                    db.execute("DELETE FROM traces WHERE seq <= (SELECT MAX(seq) FROM traces) - ?", (self.keep,))
            finally:
                db.close()
        return row.trace_id

    def get(self, trace_id: str) -> dict[str, Any] | None:
        if not self.path.is_file():
            return None
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
        try:
            row = db.execute("SELECT record FROM traces WHERE trace_id = ?", (trace_id.lower(),)).fetchone()
        except sqlite3.OperationalError:  # no table yet
            return None
        finally:
            db.close()
        record: dict[str, Any] | None = json.loads(row[0]) if row else None
        return record

    def count(self) -> int:
        if not self.path.is_file():
            return 0
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=10)
        try:
            return int(db.execute("SELECT COUNT(*) FROM traces").fetchone()[0])
        finally:
            db.close()

    def close(self) -> None:
        pass  # a connection per call: nothing held
