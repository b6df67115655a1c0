"""Sources and the documents each holds, in a collection's store: the SQL both backends share (placeholders
differ). The sync's record (citerag.app.sources): a source's configuration and status, a lease so that two syncs
of one source never run at once (on any machine), and per document the version token it was last synced at.
A document's own rows stay the store's usual ones: its key is `source:NAME:KEY` (SOURCE_SCHEME)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from citerag.errors import CiteragError
from citerag.types import SourceInfo, SourceItem

COLUMNS = "name, kind, location, options, interval_s, cron, created_at, status"
ITEM_COLUMNS = "key, token, document_id, link, origin"


def _sql(text: str, ph: str) -> str:
    return text.replace("?", ph)


def _and(scope: dict[str, Any]) -> str:
    return "".join(f" AND {k} = ?" for k in scope)


def _json(value: Any) -> Any:
    return value if isinstance(value, dict) else json.loads(value)


def _info(row: Any) -> SourceInfo:
    return SourceInfo(str(row[0]), str(row[1]), str(row[2]), _json(row[3]),
                      None if row[4] is None else float(row[4]), row[5], str(row[6]), _json(row[7]))


def every(db: Any, ph: str, scope: dict[str, Any] | None = None) -> list[SourceInfo]:
    scope = scope or {}
    rows = db.execute(_sql(f"SELECT {COLUMNS} FROM sources WHERE 1 = 1{_and(scope)} ORDER BY name", ph),
                      tuple(scope.values())).fetchall()
    return [_info(r) for r in rows]


def put(db: Any, ph: str, info: SourceInfo, create: bool, scope: dict[str, Any] | None = None) -> SourceInfo:
    """Add a source (`create`: refused when the name is taken) or replace its configuration and status."""
    scope = scope or {}
    exists = db.execute(_sql(f"SELECT created_at FROM sources WHERE name = ?{_and(scope)}", ph),
                        (info.name, *scope.values())).fetchone()
    values = (info.kind, info.location, json.dumps(info.options), info.interval_s, info.cron)
    if exists is None:
        if not create:
            raise CiteragError(f"no source named {info.name!r}")
        at = datetime.now(UTC).isoformat(timespec="seconds")
        columns = ", ".join([COLUMNS, *scope])
        db.execute(_sql(f"INSERT INTO sources ({columns}) VALUES ({', '.join('?' * (8 + len(scope)))})", ph),
                   (info.name, *values, at, json.dumps(info.status), *scope.values()))
        return SourceInfo(info.name, info.kind, info.location, info.options, info.interval_s, info.cron, at,
                          info.status)
    if create:
        raise CiteragError(f"a source named {info.name!r} exists: remove it first or choose another name")
    db.execute(_sql("UPDATE sources SET kind = ?, location = ?, options = ?, interval_s = ?, cron = ?, status = ? "
                    f"WHERE name = ?{_and(scope)}", ph),
               (*values, json.dumps(info.status), info.name, *scope.values()))
    return SourceInfo(info.name, info.kind, info.location, info.options, info.interval_s, info.cron,
                      str(exists[0]), info.status)


def remove(db: Any, ph: str, name: str, scope: dict[str, Any] | None = None) -> bool:
    scope = scope or {}
    db.execute(_sql(f"DELETE FROM source_items WHERE source = ?{_and(scope)}", ph), (name, *scope.values()))
    return bool(db.execute(_sql(f"DELETE FROM sources WHERE name = ?{_and(scope)}", ph),
                           (name, *scope.values())).rowcount)


def lease(db: Any, ph: str, name: str, holder: str, seconds: float, take_from: str | None,
          scope: dict[str, Any] | None = None) -> str | None:
    """Hold the source's sync lease for `seconds` if it is free, expired, already `holder`'s or `take_from`'s (a
    holder known dead): None then, else who holds it. `seconds` 0 lets `holder`'s lease go."""
    scope = scope or {}
    now = time.time()
    if seconds <= 0:
        db.execute(_sql(f"UPDATE sources SET lease_holder = NULL, lease_until = 0 WHERE name = ? "
                        f"AND lease_holder = ?{_and(scope)}", ph), (name, holder, *scope.values()))
        return None
    if db.execute(_sql(
            "UPDATE sources SET lease_holder = ?, lease_until = ? WHERE name = ? AND (lease_holder IS NULL OR "
            f"lease_until < ? OR lease_holder = ? OR lease_holder = ?){_and(scope)}", ph),
            (holder, now + seconds, name, now, holder, take_from or holder, *scope.values())).rowcount:
        return None
    row = db.execute(_sql(f"SELECT lease_holder FROM sources WHERE name = ?{_and(scope)}", ph),
                     (name, *scope.values())).fetchone()
    if row is None:
        raise CiteragError(f"no source named {name!r}")
    return str(row[0])


def items(db: Any, ph: str, name: str, scope: dict[str, Any] | None = None) -> list[SourceItem]:
    scope = scope or {}
    rows = db.execute(_sql(f"SELECT {ITEM_COLUMNS} FROM source_items WHERE source = ?{_and(scope)} ORDER BY key",
                           ph), (name, *scope.values())).fetchall()
    return [SourceItem(str(r[0]), str(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows]


def of_documents(db: Any, ph: str, ids: Iterable[int], scope: dict[str, Any] | None = None) -> dict[int, SourceItem]:
    """The source record of each of these documents that a source holds."""
    scope = scope or {}
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    marks = ", ".join("?" * len(wanted))
    rows = db.execute(_sql(f"SELECT {ITEM_COLUMNS} FROM source_items WHERE document_id IN ({marks}){_and(scope)}",
                           ph), (*wanted, *scope.values())).fetchall()
    return {int(r[2]): SourceItem(str(r[0]), str(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows}


def set_item(db: Any, ph: str, name: str, key: str, item: SourceItem | None,
             scope: dict[str, Any] | None = None) -> None:
    """Record the document the source holds under `key` (None: it holds none any more)."""
    scope = scope or {}
    db.execute(_sql(f"DELETE FROM source_items WHERE source = ? AND key = ?{_and(scope)}", ph),
               (name, key, *scope.values()))
    if item is None:
        return
    columns = ", ".join(["source", ITEM_COLUMNS, *scope])
    db.execute(_sql(f"INSERT INTO source_items ({columns}) VALUES ({', '.join('?' * (6 + len(scope)))})", ph),
               (name, item.key, item.token, item.document_id, item.link, item.origin, *scope.values()))
