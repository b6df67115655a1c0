"""API keys in HOME/keys.sqlite3: one machine's keys (a sqlite:/// home), and the browser sessions opened with them
(table `sessions`, created on open beside `keys` in a file an older citerag wrote). See citerag.keystore.base."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from citerag.keystore.base import KeyInfo, Principal, check, new_key, new_session, session_digest, token_prefix

KEYS_FILE = "keys.sqlite3"


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
        return db

    def create(self, collection: str | None, scope: str) -> str:
        key = new_key(collection, scope)
        with self._connect() as db:
            db.execute("INSERT INTO keys VALUES (?, ?, ?, ?, ?)",
                       (key.prefix, key.digest, key.collection, key.scope, key.created_at))
        return key.token

    def list(self) -> list[KeyInfo]:
        if not self.path.exists():  # listing creates nothing
            return []
        with self._connect() as db:
            return [KeyInfo(*row) for row in db.execute(
                "SELECT prefix, collection, scope, created_at FROM keys ORDER BY created_at, prefix")]

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
                row = db.execute("SELECT digest, collection, scope FROM keys WHERE prefix = ?", (prefix,)).fetchone()
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
            row = db.execute("SELECT s.prefix, k.collection, k.scope FROM sessions s JOIN keys k "
                             "ON k.prefix = s.prefix AND k.digest = s.key_digest "
                             "WHERE s.digest = ? AND s.expires_at > ?", (found, time.time())).fetchone()
        return Principal(*row) if row is not None else None

    def end_session(self, token: str) -> bool:
        found = session_digest(token)
        if found is None or not self.path.exists():
            return False
        with self._connect() as db:
            return db.execute("DELETE FROM sessions WHERE digest = ?", (found,)).rowcount > 0

    def close(self) -> None:
        pass  # a connection per call: nothing held
