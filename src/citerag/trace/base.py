"""What every trace store shares: the TraceStore protocol and the record of one operation (`trace_row`), the same
whichever backend keeps it. The backends (citerag.trace.store_sqlite, citerag.trace.store_postgres) import this
module, never citerag.trace.store, so that its wrapper can name them without a circle."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan

from citerag.trace.setup import OPERATION, TraceExists, span_id_hex, trace_id_hex

__all__ = ["TraceExists", "TraceRow", "TraceStore", "span_json", "trace_row", "with_feedback"]


class TraceStore(Protocol):
    """One collection's kept traces, written off the request path by a writer thread of the store's own
    (citerag.trace.writer: what each method waits for, and what a crash may lose)."""

    keep: int

    def submit(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
               texts: dict[str, str] | None = None) -> None:
        """Queue one operation's trace (its root span last) for the writer, and return at once: what an operation
        that ends calls. Never blocks on the store and never raises: a trace that cannot be kept is a warning."""
        ...

    def write(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
              texts: dict[str, str] | None = None) -> str:
        """Keep one operation's trace and wait until it is written; the oldest beyond `keep` are dropped. Returns
        its id. Raises TraceExists, keeping nothing, when a trace is already kept under its id: kept traces are
        never overwritten."""
        ...

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every trace submitted before this call is written (or failed); False on timeout."""
        ...

    def get(self, trace_id: str) -> dict[str, Any] | None:
        """The trace's record, or None (also when no trace was ever kept: reading creates nothing). Flushes
        first: a trace submitted in this process is found right away."""
        ...

    def count(self) -> int:
        """How many traces are kept (flushes first)."""
        ...

    def answers(self, since: float = 0.0, limit: int = 10_000, text_only: bool = True) -> list[dict[str, Any]]:
        """The records of kept answers ("ask" traces), those whose question text was kept unless `text_only` is
        False, started at or after `since` (seconds since the epoch), newest first, their feedback listed as in
        get(): what labelling samples and an experiment's report counts."""
        ...

    def add_feedback(self, trace_id: str, feedback: dict[str, Any]) -> int | None:
        """Keep one piece of feedback (a JSON object) on a kept trace, in a transaction of its own, and return how
        many the trace now has; None when no such trace is kept. It goes with its trace: pruned with it, deleted
        with its collection. get() lists a trace's feedback, oldest first, under "feedback" once there is some."""
        ...

    def close(self) -> None:
        """Write what is queued, end the writer thread and release what the store holds (not connections it
        borrows). The store stays usable: a later trace starts a writer again."""
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


def with_feedback(records: list[dict[str, Any]], given: Sequence[tuple[str, dict[str, Any]]],
                  text_only: bool = True) -> list[dict[str, Any]]:
    """`records` (only those whose question text was kept, if `text_only`), each with its feedback (trace id,
    feedback; oldest first) listed."""
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for trace_id, feedback in given:
        by_trace.setdefault(trace_id, []).append(feedback)
    kept = [r for r in records if r.get("text_kept") or not text_only]
    for record in kept:
        if record["trace_id"] in by_trace:
            record["feedback"] = by_trace[record["trace_id"]]
    return kept
