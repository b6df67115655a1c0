"""The trace store: each collection's recent traces in a small SQLite file beside its store (INDEX/traces.sqlite3),
bounded to the newest `trace_keep` (the oldest dropped first), so that `GET /v1/traces/{id}`, `citerag trace show`
and `citerag replay` can read one back.

A row is one operation's trace as JSON (its spans: names, ids, timings, attributes) plus the options that
replaying it needs (mode, k, threshold, ...). The question and the answer are user data: kept only when the
collection's setting `trace_text` is true. Without it nothing of the text is kept, not even its SHA-256: an
unsalted hash of a short question is found again by hashing guesses (it is still the question), and a hash
cannot be asked again, so replay could not use it anyway; replaying such a trace says so in one line.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from citerag.trace.setup import OPERATION, span_id_hex, trace_id_hex

FILE_NAME = "traces.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS traces (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    trace_id TEXT NOT NULL UNIQUE,
    operation TEXT NOT NULL,
    started REAL NOT NULL,
    record TEXT NOT NULL
)"""


def span_json(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    start, end = span.start_time or 0, span.end_time or 0
    return {"name": span.name,
            "span_id": span_id_hex(ctx.span_id) if ctx else None,
            "parent_id": span_id_hex(span.parent.span_id) if span.parent else None,
            "start": datetime.fromtimestamp(start / 1e9, UTC).isoformat(timespec="microseconds"),
            "duration_ms": round((end - start) / 1e6, 3),
            "status": span.status.status_code.name.lower(),
            "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()}}


class TraceStore:
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
        """Keep one operation's trace (its root span last); the oldest beyond `keep` are dropped. Returns its id."""
        root = spans[-1]
        assert root.context is not None
        trace_id = trace_id_hex(root.context.trace_id)
        record: dict[str, Any] = {
            "trace_id": trace_id, "collection": collection,
            "operation": (root.attributes or {}).get(OPERATION), "options": options,
            "text_kept": texts is not None, **(texts or {}),
            "spans": [span_json(s) for s in sorted(spans, key=lambda s: s.start_time or 0)]}
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO traces (trace_id, operation, started, record) VALUES (?, ?, ?, ?)",
                       (trace_id, record["operation"], (root.start_time or time.time_ns()) / 1e9,
                        json.dumps(record, ensure_ascii=False)))
            db.execute("DELETE FROM traces WHERE seq <= (SELECT MAX(seq) FROM traces) - ?", (self.keep,))
        db.close()
        return trace_id

    def get(self, trace_id: str) -> dict[str, Any] | None:
        """The trace's record, or None (also when no trace was ever kept: reading creates nothing)."""
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


def root_span(record: dict[str, Any]) -> dict[str, Any]:
    """The operation's own span in a stored record."""
    return next(s for s in record["spans"] if s["attributes"].get(OPERATION) is not None)


def spans_named(record: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in record["spans"] if s["name"] == name]
