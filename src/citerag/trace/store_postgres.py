"""Traces in the `traces` table of a postgresql:// store's database: one table for every collection (each row
names its collection_id), written by every API process and worker, so a trace id from any of them opens on any
other. See citerag.trace.base.

Reads and writes go to the primary, never to a replica: a client reads a trace back by the id its request just
returned, before a replica may have replayed it.

Written off the request path by the store's writer thread (citerag.trace.writer), a batch per transaction on a
connection of the pool (the collection store's, borrowed), taken for the batch only. What another process may
count on: a trace is committed in the time of one transaction after its operation ended, longer only while the
database is slow or the writer's queue is long, and never when its process was killed first; in the process that
ran the operation, get() and count() wait for it. GET /v1/traces/{id} looks again for a while when a trace is
not found in a shared database (citerag.service.routes.traces), so that an id one API process returned opens on
another.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from citerag.errors import CiteragError, StoreUnavailable, first_line
from citerag.store.pg_migrate import migrate
from citerag.trace.base import TraceRow, with_feedback
from citerag.trace.writer import Pending, TraceWriter

try:
    import psycopg
    from psycopg.types.json import Jsonb
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # the [postgres] extra is optional
    raise CiteragError("traces in PostgreSQL need the extra: pip install 'citerag[postgres]'") from exc

# pg_try_advisory_xact_lock(_PRUNE_LOCK, collection_id): one writer per collection prunes at a time; the others
# skip pruning (the next write prunes), so concurrent writers never wait on, or deadlock over, the same old rows.
_PRUNE_LOCK = 0x74726163  # "trac"
POOL_SIZE = 2  # only without a store to borrow from
CONNECT_TIMEOUT_S = 10


def _no_nul(value: Any) -> Any:
    """JSONB refuses U+0000 in a string (a question may carry one): replaced by U+FFFD, the rest unchanged."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_no_nul(k): _no_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nul(v) for v in value]
    return value


class PostgresTraceStore:
    """One collection's traces. `pool` is normally the collection's PostgresStore pool (borrowed, not closed)."""

    def __init__(self, pool: ConnectionPool[Any], keep: int, *, collection_id: int | None = None,
                 collection: str = "", owns_pool: bool = False, where: str = "the trace database") -> None:
        if collection_id is None and not collection:
            raise CiteragError("a PostgreSQL trace store needs a collection id or a collection name")
        self.pool = pool
        self.keep = keep
        self.collection_id = collection_id
        self.collection = collection
        self._owns_pool = owns_pool
        self._where = where
        self.writer = TraceWriter(lambda: _Rows(self), where)

    @classmethod
    def connect(cls, url: str, collection: str, keep: int, where: str = "the trace database") -> PostgresTraceStore:
        """A store with its own small pool, the schema applied, finding `collection` by name when first used."""
        try:
            with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
                migrate(conn)
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot reach the traces in {where}: {first_line(exc)}") from exc
        pool: ConnectionPool[Any] = ConnectionPool(
            url, min_size=1, max_size=POOL_SIZE, open=True, name="citerag-traces", timeout=CONNECT_TIMEOUT_S,
            kwargs={"connect_timeout": CONNECT_TIMEOUT_S, "autocommit": True})
        return cls(pool, keep, collection=collection, owns_pool=True, where=where)

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self.pool.connection() as conn, conn.transaction():
                yield conn
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot reach the traces in {self._where}: {first_line(exc)}") from exc

    def _collection_id(self, conn: psycopg.Connection[Any]) -> int | None:
        """The collection's row id; None while no row exists (the store creates it, not the trace store)."""
        if self.collection_id is None:
            row = conn.execute("SELECT id FROM collections WHERE name = %s", (self.collection,)).fetchone()
            self.collection_id = int(row[0]) if row else None
        return self.collection_id

    def submit(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
               texts: dict[str, str] | None = None) -> None:
        self.writer.submit(Pending(spans, options, collection, texts))

    def write(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
              texts: dict[str, str] | None = None) -> str:
        item = Pending(spans, options, collection, texts)
        self.writer.write(item)
        return item.trace_id

    def flush(self, timeout: float | None = None) -> bool:
        return self.writer.flush() if timeout is None else self.writer.flush(timeout)

    def write_rows(self, rows: Sequence[TraceRow]) -> list[bool]:
        """Keep `rows` in one transaction (see citerag.trace.writer.RowSink)."""
        with self._transaction() as conn:
            collection_id = self._collection_id(conn)
            if collection_id is None:  # until the collection exists, nothing is kept (and that is no error)
                return [True] * len(rows)
            added = []
            for row in rows:
                # Insert only: a kept trace is never replaced (nor made the newest) by a later one under its id.
                cursor = conn.execute(
                    "INSERT INTO traces (collection_id, trace_id, operation, started, record)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (collection_id, trace_id) DO NOTHING",
                    (collection_id, row.trace_id, row.operation, row.started, Jsonb(_no_nul(row.record))))
                added.append(cursor.rowcount == 1)
            if not any(added):
                return added
            locked = conn.execute("SELECT pg_try_advisory_xact_lock(%s, %s)", (_PRUNE_LOCK, collection_id)).fetchone()
            if locked and locked[0]:
                # The keep-th newest row's seq bounds what stays (seq is shared by every collection: not a count).
                conn.execute(
                    "DELETE FROM traces WHERE collection_id = %s AND seq < (SELECT seq FROM traces"
                    " WHERE collection_id = %s ORDER BY seq DESC OFFSET %s LIMIT 1)",
                    (collection_id, collection_id, self.keep - 1))
        return added

    def get(self, trace_id: str) -> dict[str, Any] | None:
        self.flush()  # a trace this process just ended is readable right away
        with self._transaction() as conn:
            collection_id = self._collection_id(conn)
            if collection_id is None:
                return None
            found = conn.execute("SELECT record FROM traces WHERE collection_id = %s AND trace_id = %s",
                                 (collection_id, trace_id.lower())).fetchone()
            given = conn.execute("SELECT record FROM feedback WHERE collection_id = %s AND trace_id = %s"
                                 " ORDER BY seq", (collection_id, trace_id.lower())).fetchall() if found else []
        if not found:
            return None
        record: dict[str, Any] = found[0]
        if given:
            record["feedback"] = [r[0] for r in given]
        return record

    def answers(self, since: float = 0.0, limit: int = 10_000, text_only: bool = True) -> list[dict[str, Any]]:
        self.flush()
        with self._transaction() as conn:
            collection_id = self._collection_id(conn)
            if collection_id is None:
                return []
            rows = conn.execute("SELECT record FROM traces WHERE collection_id = %s AND operation = 'ask'"
                                " AND started >= %s ORDER BY seq DESC LIMIT %s",
                                (collection_id, since, limit)).fetchall()
            given = conn.execute("SELECT trace_id, record FROM feedback WHERE collection_id = %s ORDER BY seq",
                                 (collection_id,)).fetchall()
        return with_feedback([r[0] for r in rows], [(t, f) for t, f in given], text_only)

    def add_feedback(self, trace_id: str, feedback: dict[str, Any]) -> int | None:
        self.flush()  # the answer's own trace may still be queued
        with self._transaction() as conn:
            collection_id = self._collection_id(conn)
            if collection_id is None:
                return None
            # FOR SHARE: a writer's prune of this trace waits for the commit (then drops the feedback with it).
            if conn.execute("SELECT 1 FROM traces WHERE collection_id = %s AND trace_id = %s FOR SHARE",
                            (collection_id, trace_id.lower())).fetchone() is None:
                return None
            conn.execute("INSERT INTO feedback (collection_id, trace_id, record) VALUES (%s, %s, %s)",
                         (collection_id, trace_id.lower(), Jsonb(_no_nul(feedback))))
            found = conn.execute("SELECT count(*) FROM feedback WHERE collection_id = %s AND trace_id = %s",
                                 (collection_id, trace_id.lower())).fetchone()
        return int(found[0]) if found else None

    def count(self) -> int:
        self.flush()
        with self._transaction() as conn:
            collection_id = self._collection_id(conn)
            if collection_id is None:
                return 0
            found = conn.execute("SELECT count(*) FROM traces WHERE collection_id = %s", (collection_id,)).fetchone()
        return int(found[0]) if found else 0

    def close(self) -> None:
        """Write what is queued (through the pool: close this before the store that lends it), then close the
        pool when it is the store's own."""
        self.writer.close()
        if self._owns_pool:
            self.pool.close()


class _Rows:
    """The writer thread's hold on a PostgreSQL trace store (citerag.trace.writer.RowSink): a pool connection per
    batch, so that a borrowed pool lends none for long."""

    def __init__(self, store: PostgresTraceStore) -> None:
        self.store = store

    def write(self, rows: Sequence[TraceRow]) -> list[bool]:
        return self.store.write_rows(rows)

    def close(self) -> None:
        pass
