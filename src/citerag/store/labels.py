"""Labels of production questions in a collection's store, the SQL both backends share (placeholders differ).

Labels are people's work, so they live in the store (durable, with the collection) and not beside the traces they
came from, which the trace store drops after `trace_keep`. One label per trace: labelling it again replaces it.
Like conversations they leave the generation alone: no document changed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from citerag.types import Label

COLUMNS = "trace_id, question, kind, document_id, char_start, char_end, needle, labelled_by, asked_at, labelled_at"


def _sql(text: str, ph: str) -> str:
    return text.replace("?", ph)


def put(db: Any, ph: str, label: Label, scope: dict[str, Any] | None = None) -> Label:
    """Keep `label` (its time set here), replacing the trace's earlier one, inside the caller's write transaction."""
    scope = scope or {}
    at = datetime.now(UTC).isoformat(timespec="milliseconds")
    db.execute(_sql(f"DELETE FROM labels WHERE trace_id = ?{''.join(f' AND {k} = ?' for k in scope)}", ph),
               (label.trace_id, *scope.values()))
    columns = ", ".join([COLUMNS, *scope])
    marks = ", ".join("?" * (10 + len(scope)))
    db.execute(_sql(f"INSERT INTO labels ({columns}) VALUES ({marks})", ph),
               (label.trace_id, label.question, label.kind, label.document_id, label.start, label.end, label.needle,
                label.by, label.asked_at, at, *scope.values()))
    return Label(label.trace_id, label.question, label.kind, label.document_id, label.start, label.end, label.needle,
                 label.by, label.asked_at, at)


def every(db: Any, ph: str, scope: dict[str, Any] | None = None) -> list[Label]:
    """The collection's labels, in the order their questions were asked."""
    scope = scope or {}
    where = " WHERE " + " AND ".join(f"{k} = ?" for k in scope) if scope else ""
    rows = db.execute(_sql(f"SELECT {COLUMNS} FROM labels{where} ORDER BY asked_at, trace_id", ph),
                      tuple(scope.values())).fetchall()
    return [Label(str(r[0]), str(r[1]), str(r[2]), None if r[3] is None else int(r[3]),
                  None if r[4] is None else int(r[4]), None if r[5] is None else int(r[5]), str(r[6]), str(r[7]),
                  float(r[8]), str(r[9])) for r in rows]
