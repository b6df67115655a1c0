"""API keys in the database's `api_keys` table (a postgresql:// home): one set of keys for every API process on
every machine, so `citerag keys create` anywhere opens all of them and `keys revoke` closes all of them at once.
See citerag.keystore.base for the format and the checks, which are the SQLite backend's.

Every read goes to the primary (store_url), never to a replica: a revoked key must stop working everywhere at
once, not after the replica's lag.

Browser sessions (citerag.keystore.base) live in `api_sessions`, created on open when missing. Not a numbered
migration (citerag.store.pg_schema): the table belongs to this store alone, and `CREATE TABLE IF NOT EXISTS` under
an advisory lock brings a database an older citerag set up to it on its first use, as the migrations do.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from citerag.errors import CiteragError, StoreUnavailable
from citerag.keystore.base import (
    PRINCIPAL_COLUMNS,
    KeyInfo,
    Principal,
    UserInfo,
    check,
    checked_groups,
    new_key,
    new_session,
    principal_of,
    session_digest,
    token_prefix,
)
from citerag.store.pg_migrate import migrate

try:
    import psycopg
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # the [postgres] extra is optional
    raise CiteragError("keys in PostgreSQL need the extra: pip install 'citerag[postgres]'") from exc

POOL_SIZE = 4  # every request checks a key: a few connections per process, not one per request
CONNECT_TIMEOUT_S = 10
_SESSIONS_LOCK = 0x63697465726173  # "citeras": concurrent first opens (N API processes) create the table once
SESSIONS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS api_sessions (digest TEXT PRIMARY KEY,"
    " prefix TEXT NOT NULL REFERENCES api_keys(prefix) ON DELETE CASCADE, key_digest TEXT NOT NULL,"
    " created_at TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL)",
    "CREATE INDEX IF NOT EXISTS api_sessions_by_prefix ON api_sessions (prefix)",
    "CREATE TABLE IF NOT EXISTS api_user_sessions (digest TEXT PRIMARY KEY,"
    " user_name TEXT NOT NULL REFERENCES api_users(name) ON DELETE CASCADE, created_at TEXT NOT NULL,"
    " expires_at DOUBLE PRECISION NOT NULL)",
)


class PostgresKeyStore:
    def __init__(self, url: str, where: str = "the key database") -> None:
        self.url = url
        self.where = where  # what messages name: the URL without its password
        self._pool: ConnectionPool[Any] | None = None
        self._lock = threading.Lock()

    def _open(self) -> ConnectionPool[Any]:
        """The pool, opened on first use after applying the schema (idempotent: one advisory-locked check)."""
        with self._lock:
            if self._pool is None:
                with psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
                    migrate(conn)
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SESSIONS_LOCK,))
                        for statement in SESSIONS_SCHEMA:
                            conn.execute(statement)
                self._pool = ConnectionPool(self.url, min_size=1, max_size=POOL_SIZE, open=True,
                                            name="citerag-keys", timeout=CONNECT_TIMEOUT_S,
                                            kwargs={"connect_timeout": CONNECT_TIMEOUT_S, "autocommit": True})
            return self._pool

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            with self._open().connection() as conn, conn.transaction():
                yield conn
        except psycopg.OperationalError as exc:
            # A 503 from the service, as for the store: the database, not the key, is the problem.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StoreUnavailable(f"cannot reach the API keys in {self.where}: {first}") from exc

    def create(self, collection: str | None, scope: str, user: str | None = None,
               groups: Sequence[str] = ()) -> str:
        key = new_key(collection, scope, user, groups)
        with self._transaction() as conn:
            if user is not None and conn.execute("SELECT 1 FROM api_users WHERE name = %s FOR SHARE",
                                                 (user,)).fetchone() is None:
                raise CiteragError(f"no user {user!r}: add it with `citerag users add {user} --group GROUP`")
            conn.execute("INSERT INTO api_keys (prefix, digest, collection, scope, created_at, user_name, member_of)"
                         " VALUES (%s, %s, %s, %s, %s, %s, %s::jsonb)", (key.prefix, key.digest, key.collection,
                                                                          key.scope, key.created_at, key.user,
                                                                          key.groups))
        return key.token

    def put_user(self, name: str, groups: Sequence[str], origin: str = "local") -> UserInfo:
        now, member_of = datetime.now(UTC).isoformat(timespec="seconds"), json.dumps(checked_groups(groups))
        with self._transaction() as conn:
            row = conn.execute("INSERT INTO api_users VALUES (%s, %s::jsonb, %s, %s, %s) ON CONFLICT (name) DO UPDATE"
                               " SET member_of = excluded.member_of, origin = excluded.origin,"
                               " updated_at = excluded.updated_at RETURNING *",
                               (name, member_of, origin, now, now)).fetchone()
        assert row is not None  # an upsert returns its row
        return UserInfo(row[0], tuple(row[1]), *row[2:])

    def users(self) -> list[UserInfo]:
        with self._transaction() as conn:
            rows = conn.execute("SELECT * FROM api_users ORDER BY name").fetchall()
        return [UserInfo(row[0], tuple(row[1]), *row[2:]) for row in rows]

    def remove_user(self, name: str) -> bool:
        with self._transaction() as conn:  # its keys and their sessions, and its own sessions, cascade
            return conn.execute("DELETE FROM api_users WHERE name = %s", (name,)).rowcount > 0

    def start_user_session(self, user: str, ttl_s: float) -> str | None:
        session = new_session(f"user:{user}", ttl_s)
        with self._transaction() as conn:
            conn.execute("DELETE FROM api_user_sessions WHERE expires_at <= %s", (time.time(),))
            inserted = conn.execute("INSERT INTO api_user_sessions SELECT %s, name, %s, %s FROM api_users"
                                    " WHERE name = %s", (session.digest, session.created_at, session.expires_at,
                                                         user))
            return session.token if inserted.rowcount == 1 else None

    def list(self) -> list[KeyInfo]:
        with self._transaction() as conn:
            rows = conn.execute("SELECT prefix, collection, scope, created_at, user_name, member_of FROM api_keys"
                                " ORDER BY created_at, prefix").fetchall()
        return [KeyInfo(row[0], row[1], row[2], row[3], row[4], tuple(row[5])) for row in rows]

    def revoke(self, prefix: str) -> bool:
        with self._transaction() as conn:  # its sessions go with it (ON DELETE CASCADE)
            return conn.execute("DELETE FROM api_keys WHERE prefix = %s", (prefix,)).rowcount > 0

    def revoke_collection(self, collection: str) -> int:
        with self._transaction() as conn:
            return conn.execute("DELETE FROM api_keys WHERE collection = %s", (collection,)).rowcount

    def verify(self, token: str) -> Principal | None:
        prefix = token_prefix(token)
        row = None
        if prefix:
            with self._transaction() as conn:
                row = conn.execute(f"SELECT k.digest, {PRINCIPAL_COLUMNS} FROM api_keys k LEFT JOIN api_users u"
                                   " ON u.name = k.user_name WHERE k.prefix = %s", (prefix,)).fetchone()
        return check(token, row)

    def start_session(self, key: str, ttl_s: float) -> str | None:
        if self.verify(key) is None:
            return None
        session = new_session(key, ttl_s)
        with self._transaction() as conn:
            conn.execute("DELETE FROM api_sessions WHERE expires_at <= %s", (time.time(),))  # expired ones, swept
            # Inserted only while the key still exists: a revoke between the check and here leaves no session.
            inserted = conn.execute(
                "INSERT INTO api_sessions (digest, prefix, key_digest, created_at, expires_at)"
                " SELECT %s, prefix, digest, %s, %s FROM api_keys WHERE prefix = %s AND digest = %s",
                (session.digest, session.created_at, session.expires_at, session.prefix, session.key_digest))
            return session.token if inserted.rowcount == 1 else None

    def verify_session(self, token: str) -> Principal | None:
        found = session_digest(token)
        if found is None:
            return None
        with self._transaction() as conn:
            # Joined to its key (prefix and hash): another key under a reused prefix opens no old session.
            row = conn.execute(f"SELECT s.prefix, {PRINCIPAL_COLUMNS} FROM api_sessions s JOIN api_keys k"
                               " ON k.prefix = s.prefix AND k.digest = s.key_digest LEFT JOIN api_users u"
                               " ON u.name = k.user_name WHERE s.digest = %s AND s.expires_at > %s",
                               (found, time.time())).fetchone()
            if row is not None:
                return principal_of(*row)
            # A signed-in user's session: every collection, read scope, the user's groups as they are now.
            row = conn.execute("SELECT u.name, u.member_of FROM api_user_sessions s JOIN api_users u"
                               " ON u.name = s.user_name WHERE s.digest = %s AND s.expires_at > %s",
                               (found, time.time())).fetchone()
        return None if row is None else principal_of(f"user:{row[0]}", None, "read", row[0], row[1])

    def end_session(self, token: str) -> bool:
        found = session_digest(token)
        if found is None:
            return False
        with self._transaction() as conn:
            ended = conn.execute("DELETE FROM api_sessions WHERE digest = %s", (found,)).rowcount
            return ended + conn.execute("DELETE FROM api_user_sessions WHERE digest = %s", (found,)).rowcount > 0

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
