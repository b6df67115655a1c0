"""API keys in HOME/keys.sqlite3: one machine's keys (a sqlite:/// home), its users, and the browser sessions
opened with a key (`sessions`) or by a signed-in user (`user_sessions`); tables and columns an older citerag's file
lacks are added on open. See citerag.keystore.base."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from citerag.errors import CiteragError
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

KEYS_FILE = "keys.sqlite3"


def _user(row: tuple[str, str, str, str, str]) -> UserInfo:
    return UserInfo(row[0], tuple(json.loads(row[1])), row[2], row[3], row[4])


class SqliteKeyStore:
    def __init__(self, home: Path) -> None:
        self.path = home / KEYS_FILE

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("CREATE TABLE IF NOT EXISTS keys (prefix TEXT PRIMARY KEY, digest TEXT NOT NULL, "
                   "collection TEXT, scope TEXT NOT NULL, created_at TEXT NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS sessions (digest TEXT PRIMARY KEY, prefix TEXT NOT NULL, "
                   "key_digest TEXT NOT NULL, created_at TEXT NOT NULL, expires_at REAL NOT NULL)")
        db.execute("CREATE INDEX IF NOT EXISTS sessions_by_prefix ON sessions (prefix)")
        db.execute("CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, member_of TEXT NOT NULL DEFAULT '[]', "
                   "origin TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL)")
        db.execute("CREATE TABLE IF NOT EXISTS user_sessions (digest TEXT PRIMARY KEY, user_name TEXT NOT NULL, "
                   "created_at TEXT NOT NULL, expires_at REAL NOT NULL)")
        if "user_name" not in {row[1] for row in db.execute("PRAGMA table_info(keys)")}:
            with db:  # keys.sqlite3 of before users (issue 30)
                db.execute("ALTER TABLE keys ADD COLUMN user_name TEXT")
                db.execute("ALTER TABLE keys ADD COLUMN member_of TEXT NOT NULL DEFAULT '[]'")
        return db

    def create(self, collection: str | None, scope: str, user: str | None = None,
               groups: Sequence[str] = ()) -> str:
        key = new_key(collection, scope, user, groups)
        with self._connect() as db:
            if user is not None and db.execute("SELECT 1 FROM users WHERE name = ?", (user,)).fetchone() is None:
                raise CiteragError(f"no user {user!r}: add it with `citerag users add {user} --group GROUP`")
            db.execute("INSERT INTO keys (prefix, digest, collection, scope, created_at, user_name, member_of)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?)", (key.prefix, key.digest, key.collection, key.scope,
                                                         key.created_at, key.user, key.groups))
        return key.token

    def put_user(self, name: str, groups: Sequence[str], origin: str = "local") -> UserInfo:
        now, member_of = datetime.now(UTC).isoformat(timespec="seconds"), json.dumps(checked_groups(groups))
        with self._connect() as db:
            db.execute("INSERT INTO users VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                       "member_of = excluded.member_of, origin = excluded.origin, updated_at = excluded.updated_at",
                       (name, member_of, origin, now, now))
            row = db.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchone()
        return _user(row)

    def users(self) -> list[UserInfo]:
        if not self.path.exists():
            return []
        with self._connect() as db:
            return [_user(row) for row in db.execute("SELECT * FROM users ORDER BY name")]

    def remove_user(self, name: str) -> bool:
        with self._connect() as db:  # one transaction: its keys and sessions go with it
            db.execute("DELETE FROM user_sessions WHERE user_name = ?", (name,))
            db.execute("DELETE FROM sessions WHERE prefix IN (SELECT prefix FROM keys WHERE user_name = ?)", (name,))
            db.execute("DELETE FROM keys WHERE user_name = ?", (name,))
            return db.execute("DELETE FROM users WHERE name = ?", (name,)).rowcount > 0

    def start_user_session(self, user: str, ttl_s: float) -> str | None:
        session = new_session(f"user:{user}", ttl_s)
        with self._connect() as db:
            db.execute("DELETE FROM user_sessions WHERE expires_at <= ?", (time.time(),))
            inserted = db.execute("INSERT INTO user_sessions SELECT ?, name, ?, ? FROM users WHERE name = ?",
                                  (session.digest, session.created_at, session.expires_at, user))
        return session.token if inserted.rowcount == 1 else None

    def list(self) -> list[KeyInfo]:
        if not self.path.exists():  # listing creates nothing
            return []
        with self._connect() as db:
            return [KeyInfo(row[0], row[1], row[2], row[3], row[4], tuple(json.loads(row[5]))) for row in db.execute(
                "SELECT prefix, collection, scope, created_at, user_name, member_of FROM keys"
                " ORDER BY created_at, prefix")]

    def revoke(self, prefix: str) -> bool:
        with self._connect() as db:  # one transaction: a revoked key's sessions end with it
            db.execute("DELETE FROM sessions WHERE prefix = ?", (prefix,))
            return db.execute("DELETE FROM keys WHERE prefix = ?", (prefix,)).rowcount > 0

    def revoke_collection(self, collection: str) -> int:
        if not self.path.exists():
            return 0
        with self._connect() as db:
            db.execute("DELETE FROM sessions WHERE prefix IN (SELECT prefix FROM keys WHERE collection = ?)",
                       (collection,))
            return db.execute("DELETE FROM keys WHERE collection = ?", (collection,)).rowcount

    def verify(self, token: str) -> Principal | None:
        prefix = token_prefix(token)
        row = None
        if prefix and self.path.exists():
            with self._connect() as db:
                row = db.execute(f"SELECT k.digest, {PRINCIPAL_COLUMNS} FROM keys k LEFT JOIN users u ON u.name = "
                                 "k.user_name WHERE k.prefix = ?", (prefix,)).fetchone()
        return check(token, row)

    def start_session(self, key: str, ttl_s: float) -> str | None:
        if self.verify(key) is None:
            return None
        session = new_session(key, ttl_s)
        with self._connect() as db:
            db.execute("DELETE FROM sessions WHERE expires_at <= ?", (time.time(),))  # expired ones, swept here
            # Inserted only while the key still exists: a revoke between the check and here leaves no session.
            inserted = db.execute(
                "INSERT INTO sessions SELECT ?, prefix, digest, ?, ? FROM keys WHERE prefix = ? AND digest = ?",
                (session.digest, session.created_at, session.expires_at, session.prefix, session.key_digest))
        return session.token if inserted.rowcount == 1 else None

    def verify_session(self, token: str) -> Principal | None:
        found = session_digest(token)
        if found is None or not self.path.exists():
            return None
        with self._connect() as db:
            # Joined to its key (prefix and hash): no key row, or another key under the prefix, no session.
            row = db.execute(f"SELECT s.prefix, {PRINCIPAL_COLUMNS} FROM sessions s JOIN keys k "
                             "ON k.prefix = s.prefix AND k.digest = s.key_digest LEFT JOIN users u "
                             "ON u.name = k.user_name WHERE s.digest = ? AND s.expires_at > ?",
                             (found, time.time())).fetchone()
            if row is not None:
                return principal_of(*row)
            # A signed-in user's session: every collection, read scope, the user's groups as they are now.
            row = db.execute("SELECT u.name, u.member_of FROM user_sessions s JOIN users u ON u.name = s.user_name "
                             "WHERE s.digest = ? AND s.expires_at > ?", (found, time.time())).fetchone()
        return None if row is None else principal_of(f"user:{row[0]}", None, "read", row[0], row[1])

    def end_session(self, token: str) -> bool:
        found = session_digest(token)
        if found is None or not self.path.exists():
            return False
        with self._connect() as db:
            ended = db.execute("DELETE FROM sessions WHERE digest = ?", (found,)).rowcount
            return ended + db.execute("DELETE FROM user_sessions WHERE digest = ?", (found,)).rowcount > 0

    def close(self) -> None:
        pass  # a connection per call: nothing held
