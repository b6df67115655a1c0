"""The trace store: each collection's recent traces, bounded to the newest `trace_keep` (the oldest dropped first),
so that `GET /v1/traces/{id}`, `citerag trace show` and `citerag replay` can read one back.

Two backends behind `TraceStore`, chosen by the store URL (`open_trace_store`): a small SQLite file beside a
sqlite:/// store (INDEX/traces.sqlite3, citerag.trace.store_sqlite), or the `traces` table of a postgresql://
store's database (citerag.trace.store_postgres), where every API process and worker of a collection writes to,
and reads back from, the same rows: a trace id returned by one process opens on any other.

A row is one operation's trace as JSON (its spans: names, ids, timings, attributes) plus the options that
replaying it needs (mode, k, threshold, ...). The question and the answer are user data: kept only when the
collection's setting `trace_text` is true. Without it nothing of the text is kept, not even its SHA-256: an
unsalted hash of a short question is found again by hashing guesses (it is still the question), and a hash
cannot be asked again, so replay could not use it anyway; replaying such a trace says so in one line.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan

from citerag.trace.setup import OPERATION, span_id_hex, trace_id_hex

if TYPE_CHECKING:
    from citerag.settings import Settings


class TraceStore(Protocol):
    """One collection's kept traces."""

    keep: int

    def write(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
              texts: dict[str, str] | None = None) -> str:
        """Keep one operation's trace (its root span last); the oldest beyond `keep` are dropped. Returns its id."""
        ...

    def get(self, trace_id: str) -> dict[str, Any] | None:
        """The trace's record, or None (also when no trace was ever kept: reading creates nothing)."""
        ...

    def count(self) -> int:
        ...

    def close(self) -> None:
        """Release what the store holds (a no-op where it borrows its connections)."""
        ...


@dataclass(frozen=True)
class TraceRow:
    """What a backend stores for one operation."""

    trace_id: str
    operation: str | None
    started: float  # seconds since the epoch
    record: dict[str, Any]


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


def trace_row(spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
              texts: dict[str, str] | None) -> TraceRow:
    """One operation's record (its root span last in `spans`), the same whichever backend keeps it."""
    root = spans[-1]
    assert root.context is not None
    trace_id = trace_id_hex(root.context.trace_id)
    operation = (root.attributes or {}).get(OPERATION)
    record: dict[str, Any] = {
        "trace_id": trace_id, "collection": collection, "operation": operation, "options": options,
        "text_kept": texts is not None, **(texts or {}),
        "spans": [span_json(s) for s in sorted(spans, key=lambda s: s.start_time or 0)]}
    return TraceRow(trace_id, None if operation is None else str(operation),
                    (root.start_time or time.time_ns()) / 1e9, record)


def open_trace_store(settings: Settings, store: object | None = None) -> TraceStore | None:
    """The trace store of the collection `settings` name; None when it keeps none (trace_keep = 0).

    For a postgresql:// store, pass the collection's open store: its pool and collection id are borrowed (no
    connections of its own). Without one, the store opens a small pool and finds the collection by name when it
    first needs it; until the collection exists, nothing is kept and nothing is found.
    """
    if settings.trace_keep == 0:
        return None
    if settings.store_scheme == "postgresql":
        from citerag.trace.store_postgres import PostgresTraceStore

        pool, collection_id = getattr(store, "pool", None), getattr(store, "collection_id", None)
        if pool is not None and isinstance(collection_id, int):
            return PostgresTraceStore(pool, settings.trace_keep, collection_id=collection_id)
        return PostgresTraceStore.connect(settings.store_url, settings.collection, settings.trace_keep,
                                          where=settings.safe_url)
    from citerag.trace.store_sqlite import FILE_NAME, SqliteTraceStore

    return SqliteTraceStore(settings.sqlite_dir / FILE_NAME, settings.trace_keep)


def root_span(record: dict[str, Any]) -> dict[str, Any]:
    """The operation's own span in a stored record."""
    return next(s for s in record["spans"] if s["attributes"].get(OPERATION) is not None)


def spans_named(record: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in record["spans"] if s["name"] == name]
