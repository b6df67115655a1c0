"""Collections of a PostgreSQL home: rows of `collections` in the store's database, each with the settings a
client gave it (JSON); every other setting is the home's (the operator's). The home collection is the one the
home settings name; the others are created and deleted through the API. Deleting one drops the collection's
rows through `drop`, which citerag.backends.postgres wires to the store's own `drop_collection`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from citerag.catalog.base import check_changes, is_collection_name
from citerag.errors import CiteragError, StoreUnavailable, first_line
from citerag.settings import Settings, redact_url
from citerag.store.pg_migrate import ensure_current

CONNECT_TIMEOUT_S = 10
DropCollection = Callable[[str], None]  # removes the named collection and every row of it, in one transaction


class PostgresCatalog:
    def __init__(self, home: Settings, drop: DropCollection) -> None:
        self.home = home
        self._drop = drop
        self._where = redact_url(home.store_url)
        # A small pool: the service asks the catalog on every request (is the path's collection still there?).
        self._pool = ConnectionPool(home.store_url, min_size=1, max_size=4, name="citerag-catalog", open=False,
                                    kwargs={"connect_timeout": CONNECT_TIMEOUT_S, "autocommit": True},
                                    timeout=CONNECT_TIMEOUT_S)
        # The first connection by hand, so that a server that is down fails now, in one line, with its cause.
        with self._environment(), psycopg.connect(home.store_url, connect_timeout=CONNECT_TIMEOUT_S,
                                                  autocommit=True) as conn:
            ensure_current(conn, self._where)
            conn.execute("INSERT INTO collections (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                         (home.collection,))

    @contextmanager
    def _environment(self) -> Iterator[None]:
        try:
            yield
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise StoreUnavailable(f"cannot read the collections at {self._where}: {first_line(exc)}") from exc

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        self._pool.open()  # on first use (opening an open pool does nothing)
        with self._environment(), self._pool.connection() as conn:
            return conn.execute(sql, args).fetchall()

    def close(self) -> None:
        self._pool.close()

    def names(self) -> list[str]:
        # A row an older rule let in (".." and the like) is no collection: no path or route could name it safely.
        others = [r[0] for r in self._rows("SELECT name FROM collections WHERE name <> %s ORDER BY name",
                                           (self.home.collection,)) if is_collection_name(r[0])]
        return [self.home.collection, *others]

    def exists(self, name: str) -> bool:
        return name == self.home.collection or (is_collection_name(name) and bool(
            self._rows("SELECT 1 FROM collections WHERE name = %s", (name,))))

    def settings(self, name: str) -> Settings:
        if name == self.home.collection:
            return self.home
        rows = self._rows("SELECT settings FROM collections WHERE name = %s", (name,))
        if not rows:
            raise CiteragError(f"no collection {name!r}")
        return self.home.with_changes(collection=name, **rows[0][0])

    def create(self, name: str, changes: dict[str, Any]) -> Settings:
        check_changes(self.home, name, changes)
        created = self._rows("INSERT INTO collections (name, settings) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING"
                             " RETURNING id", (name, json.dumps(changes)))
        if not created:
            raise CiteragError(f"collection {name!r} already exists")
        try:
            return self.settings(name)
        except BaseException:
            # A create that fails leaves nothing behind; the row is this create's own (its id).
            self._rows("DELETE FROM collections WHERE id = %s RETURNING id", (created[0][0],))
            raise

    def identity(self, name: str) -> object | None:
        rows = self._rows("SELECT id FROM collections WHERE name = %s", (name,))
        return rows[0][0] if rows else None

    def delete(self, name: str) -> None:
        if name == self.home.collection:
            raise CiteragError(f"the home collection {name!r} cannot be deleted")
        if not self.exists(name):
            raise CiteragError(f"no collection {name!r}")
        self._drop(name)
