"""The trace store: each collection's recent traces, bounded to the newest `trace_keep` (the oldest dropped first),
so that `GET /v1/traces/{id}`, `citerag trace show` and `citerag replay` can read one back.

Two backends behind `TraceStore` (citerag.trace.base), chosen by the store URL (citerag.backends): a small
SQLite file beside a sqlite:/// store (INDEX/traces.sqlite3, citerag.trace.store_sqlite), or the `traces` table of
a postgresql:// store's database (citerag.trace.store_postgres), where every API process and worker of a
collection writes to, and reads back from, the same rows: a trace id returned by one process opens on any other.
Either is written off the request path, by a writer thread per store (citerag.trace.writer): an operation queues
its trace and goes on; a read in the same process waits for the queue, one in another process finds the trace
once that process has committed it (the time of one transaction, normally).

A row is one operation's trace as JSON (its spans: names, ids, timings, attributes) plus the options that
replaying it needs (mode, k, threshold, ...). The question and the answer are user data: kept only when the
collection's setting `trace_text` is true. Without it nothing of the text is kept, not even its SHA-256: an
unsalted hash of a short question is found again by hashing guesses (it is still the question), and a hash
cannot be asked again, so replay could not use it anyway; replaying such a trace says so in one line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from citerag.trace.base import TraceRow, TraceStore, span_json, trace_row
from citerag.trace.setup import OPERATION

if TYPE_CHECKING:
    pass


def root_span(record: dict[str, Any]) -> dict[str, Any]:
    """The operation's own span in a stored record."""
    return next(s for s in record["spans"] if s["attributes"].get(OPERATION) is not None)


def spans_named(record: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [s for s in record["spans"] if s["name"] == name]


__all__ = ["TraceRow", "TraceStore", "root_span", "span_json", "spans_named", "trace_row"]
