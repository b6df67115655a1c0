"""The audit trail in HOME/audit.sqlite3, beside HOME/keys.sqlite3: a sqlite:/// home's events, every collection's
in one file (see citerag.audit.base). A connection per call, as the key store does: nothing is held between
requests, and every API process of the machine writes to, and reads from, the same file.

WAL with synchronous = NORMAL: an event costs no fsync of its own. A power loss may lose the last events, never
the file; the process's own crash loses nothing committed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from datetime import datetime
from pathlib import Path

from citerag.audit.base import AuditEvent, AuditQuery, Recorder, Row, cutoff
from citerag.errors import StoreUnavailable, first_line

FILE_NAME = "audit.sqlite3"
BUSY_TIMEOUT_S = 5  # a request waits no longer than this for another process's write
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS audit_events (seq INTEGER PRIMARY KEY, at TEXT NOT NULL, principal TEXT NOT NULL,"
    " action TEXT NOT NULL, collection TEXT, trace_id TEXT, documents TEXT NOT NULL, detail TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS audit_events_by_collection ON audit_events (collection, at)",
    "CREATE INDEX IF NOT EXISTS audit_events_by_principal ON audit_events (principal, at)",
    "CREATE INDEX IF NOT EXISTS audit_events_by_at ON audit_events (at)",
)
_COLUMNS = "at, principal, action, collection, trace_id, documents, detail"


class SqliteAuditLog(Recorder):
    def __init__(self, home: Path, retention_days: float) -> None:
        self.path = home / FILE_NAME
        super().__init__(retention_days, str(self.path))

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        try:
            # A property of the file, kept from then on; a reader elsewhere may refuse the switch for now.
            with suppress(sqlite3.OperationalError):
                db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            for statement in _SCHEMA:
                db.execute(statement)
        except BaseException:
            db.close()
            raise
        return db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with closing(self._connect()) as db, db:
            yield db

    def _insert(self, row: Row) -> None:
        with self._transaction() as db:
            db.execute(f"INSERT INTO audit_events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (row.at, row.principal, row.action, row.collection, row.trace_id, json.dumps(row.documents),
                        row.detail))

    def query(self, *, collection: str | None = None, principal: str | None = None, action: str | None = None,
              since: str | datetime | None = None, until: str | datetime | None = None,
              document: int | None = None, limit: int = 100) -> list[AuditEvent]:
        q = AuditQuery.parse(collection=collection, principal=principal, action=action, since=since, until=until,
                             document=document, limit=limit)
        if not self.path.exists():  # reading creates nothing
            return []
        where, args = q.where("?", "EXISTS (SELECT 1 FROM json_each(audit_events.documents) WHERE json_each.value = ?)")
        try:
            with self._transaction() as db:
                rows = db.execute(f"SELECT {_COLUMNS} FROM audit_events{where} ORDER BY at DESC, seq DESC LIMIT ?",
                                  (*args, q.limit)).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot read the audit trail at {self.path}: {first_line(exc)}") from exc
        return [AuditEvent(at, who, what, name, trace, tuple(json.loads(docs)), json.loads(detail))
                for at, who, what, name, trace, docs, detail in rows]

    def sweep(self, retention_days: float) -> int:
        if not self.path.exists():
            return 0
        try:
            with self._transaction() as db:
                return db.execute("DELETE FROM audit_events WHERE at < ?", (cutoff(retention_days),)).rowcount
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot sweep the audit trail at {self.path}: {first_line(exc)}") from exc

    def close(self) -> None:
        pass  # a connection per call: nothing held
