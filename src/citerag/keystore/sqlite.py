"""API keys in HOME/keys.sqlite3: one machine's keys (a sqlite:/// home). See citerag.keystore.base."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from citerag.keystore.base import KeyInfo, Principal, check, new_key, token_prefix

KEYS_FILE = "keys.sqlite3"


class SqliteKeyStore:
    def __init__(self, home: Path) -> None:
        self.path = home / KEYS_FILE

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("CREATE TABLE IF NOT EXISTS keys (prefix TEXT PRIMARY KEY, digest TEXT NOT NULL, "
                   "collection TEXT, scope TEXT NOT NULL, created_at TEXT NOT NULL)")
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
        with self._connect() as db:
            return db.execute("DELETE FROM keys WHERE prefix = ?", (prefix,)).rowcount > 0

    def revoke_collection(self, collection: str) -> int:
        if not self.path.exists():
            return 0
        with self._connect() as db:
            return db.execute("DELETE FROM keys WHERE collection = ?", (collection,)).rowcount

    def verify(self, token: str) -> Principal | None:
        prefix = token_prefix(token)
        row = None
        if prefix and self.path.exists():
            with self._connect() as db:
                row = db.execute("SELECT digest, collection, scope FROM keys WHERE prefix = ?", (prefix,)).fetchone()
        return check(token, row)

    def close(self) -> None:
        pass  # a connection per call: nothing held
