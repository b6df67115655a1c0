"""The audit trail in the database's `audit_events` table (a postgresql:// home; migration 0013): one trail for
every API process on every machine (see citerag.audit.base). Reads and writes go to the primary (store_url).

A small pool of its own, opened on first use after applying the schema migrations, as the key store's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from citerag.audit.base import AuditEvent, AuditQuery, Recorder, Row, as_datetime, cutoff, format_time
from citerag.errors import CiteragError, StoreUnavailable, first_line
from citerag.store.pg_migrate import migrate

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # the [postgres] extra is optional
    raise CiteragError("an audit trail in PostgreSQL needs the extra: pip install 'citerag[postgres]'") from exc

POOL_SIZE = 4
CONNECT_TIMEOUT_S = 10
_COLUMNS = "at, principal, action, collection, trace_id, documents, detail"


class PostgresAuditLog(Recorder):
    def __init__(self, url: str, retention_days: float, where: str = "the audit database") -> None:
        super().__init__(retention_days, where)
        self.url = url
        self._pool: ConnectionPool[Any] | None = None
        self._pool_lock = threading.Lock()

    def _open(self) -> ConnectionPool[Any]:
        with self._pool_lock:
            if self._pool is None:
                with psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
                    migrate(conn)
                self._pool = ConnectionPool(self.url, min_size=1, max_size=POOL_SIZE, open=True,
                                            name="citerag-audit", timeout=CONNECT_TIMEOUT_S,
                                            kwargs={"connect_timeout": CONNECT_TIMEOUT_S, "autocommit": True})
            return self._pool

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._open().connection() as conn:
                yield conn
        except psycopg.Error as exc:  # unreachable, or a schema not this citerag's: a 503 for a reader
            raise StoreUnavailable(f"cannot reach the audit trail in {self.where}: {first_line(exc)}") from exc

    def _insert(self, row: Row) -> None:
        with self._connection() as conn:
            conn.execute(f"INSERT INTO audit_events ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s::bigint[], %s::jsonb)",
                         (as_datetime(row.at), row.principal, row.action, row.collection, row.trace_id,
                          row.documents, row.detail))

    def query(self, *, collection: str | None = None, principal: str | None = None, action: str | None = None,
              since: str | datetime | None = None, until: str | datetime | None = None,
              document: int | None = None, limit: int = 100) -> list[AuditEvent]:
        q = AuditQuery.parse(collection=collection, principal=principal, action=action, since=since, until=until,
                             document=document, limit=limit)
        where, args = q.where("%s", "%s = ANY (documents)", as_datetime)
        with self._connection() as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM audit_events{where} ORDER BY at DESC, seq DESC LIMIT %s",
                                (*args, q.limit)).fetchall()
        return [AuditEvent(format_time(at), who, what, name, trace, tuple(docs), detail)
                for at, who, what, name, trace, docs, detail in rows]

    def sweep(self, retention_days: float) -> int:
        with self._connection() as conn:
            return conn.execute("DELETE FROM audit_events WHERE at < %s",
                                (as_datetime(cutoff(retention_days)),)).rowcount

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
