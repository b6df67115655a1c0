"""Originals in a PostgreSQL store's own database: the `originals` table, keyed by collection id and SHA-256.

Every API process and every queue worker on any machine reaches the same bytes, and deleting a collection
deletes its originals with it (ON DELETE CASCADE). citerag.backends.postgres passes in how to connect (the
store's pool) and the collection's id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg

from citerag.errors import StoreUnavailable, first_line

Connect = Callable[[], AbstractContextManager[Any]]


class PostgresOriginals:
    def __init__(self, connect: Connect, collection_id: int, where: str) -> None:
        self._connect = connect
        self.collection_id = collection_id
        self._where = where  # the URL without its password, for messages

    @contextmanager
    def _conn(self, doing: str) -> Iterator[Any]:
        try:
            with self._connect() as conn:
                yield conn
        except psycopg.OperationalError as exc:
            raise StoreUnavailable(f"cannot {doing} an original in the store at {self._where}: "
                                   f"{first_line(exc)}") from exc

    def save(self, sha256: str, data: bytes) -> None:
        with self._conn("save") as conn:
            # One statement: two uploads of the same bytes at once both succeed and store them once.
            conn.execute("INSERT INTO originals (collection_id, sha256, data) VALUES (%s, %s, %s)"
                         " ON CONFLICT (collection_id, sha256) DO NOTHING", (self.collection_id, sha256, data))

    def read(self, sha256: str) -> bytes | None:
        with self._conn("read") as conn:
            row = conn.execute("SELECT data FROM originals WHERE collection_id = %s AND sha256 = %s",
                               (self.collection_id, sha256)).fetchone()
        return bytes(row[0]) if row is not None else None

    def remove_unreferenced(self, sha256: str) -> None:
        with self._conn("remove") as conn:
            # The check and the delete in one statement, on the primary.
            conn.execute("DELETE FROM originals o WHERE o.collection_id = %s AND o.sha256 = %s AND NOT EXISTS"
                         " (SELECT 1 FROM documents d WHERE d.collection_id = o.collection_id"
                         " AND d.sha256 = o.sha256)", (self.collection_id, sha256))
