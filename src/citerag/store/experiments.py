"""Experiments in a collection's store, the SQL both backends share (placeholders differ). In the store, not in a
config file, so that every API process of a collection sees an experiment start or stop at its next request. At
most one runs at a time; stopped ones stay, so that their traffic can still be reported.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from citerag.errors import CiteragError
from citerag.types import Experiment

COLUMNS = "name, arm_a, arm_b, split, sticky, started_at, stopped_at"


def _sql(text: str, ph: str) -> str:
    return text.replace("?", ph)


def _where(scope: dict[str, Any], first: bool = False) -> str:
    parts = [f"{k} = ?" for k in scope]
    if not parts:
        return ""
    return (" WHERE " if first else " AND ") + " AND ".join(parts)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _experiment(row: tuple[Any, ...]) -> Experiment:
    arms = [r if isinstance(r, dict) else json.loads(r) for r in (row[1], row[2])]
    return Experiment(str(row[0]), arms[0], arms[1], float(row[3]), str(row[4]), str(row[5]),
                      None if row[6] is None else str(row[6]))


def start(db: Any, ph: str, e: Experiment, scope: dict[str, Any] | None = None) -> Experiment:
    """Inside the caller's write transaction: refused while another runs, or when the name was used before."""
    scope = scope or {}
    running = db.execute(_sql(f"SELECT name FROM experiments WHERE stopped_at IS NULL{_where(scope)}", ph),
                         tuple(scope.values())).fetchone()
    if running is not None:
        raise CiteragError(f"experiment {running[0]!r} is running: stop it first")
    if db.execute(_sql(f"SELECT 1 FROM experiments WHERE name = ?{_where(scope)}", ph),
                  (e.name, *scope.values())).fetchone() is not None:
        raise CiteragError(f"an experiment named {e.name!r} ran before: choose another name")
    at = _now()
    columns = ", ".join([COLUMNS, *scope])
    db.execute(_sql(f"INSERT INTO experiments ({columns}) VALUES ({', '.join('?' * (7 + len(scope)))})", ph),
               (e.name, json.dumps(e.a), json.dumps(e.b), e.split, e.sticky, at, None, *scope.values()))
    return Experiment(e.name, e.a, e.b, e.split, e.sticky, at, None)


def stop(db: Any, ph: str, scope: dict[str, Any] | None = None) -> Experiment | None:
    scope = scope or {}
    row = db.execute(_sql(f"UPDATE experiments SET stopped_at = ? WHERE stopped_at IS NULL{_where(scope)} "
                          f"RETURNING {COLUMNS}", ph), (_now(), *scope.values())).fetchone()
    return None if row is None else _experiment(tuple(row))


def every(db: Any, ph: str, scope: dict[str, Any] | None = None) -> list[Experiment]:
    """The collection's experiments, the newest first (a running one is always the newest)."""
    scope = scope or {}
    rows = db.execute(_sql(f"SELECT {COLUMNS} FROM experiments{_where(scope, first=True)} "
                           "ORDER BY started_at DESC, name", ph), tuple(scope.values())).fetchall()
    return [_experiment(tuple(r)) for r in rows]
