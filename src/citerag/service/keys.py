"""API keys: `crk_<prefix>_<secret>`, random, shown once, stored only as a SHA-256 hash, compared in constant time.

A key is scoped to one collection (read < write < admin), or, created without a collection, is a server admin key
(creates collections, sees all). SHA-256 rather than a slow password hash: the secret is 192 random bits, so
there is nothing to brute-force, and every request checks a key.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from citerag.errors import CiteragError

SCOPES = ("read", "write", "admin")
KEYS_FILE = "keys.sqlite3"
PREFIX = "crk_"


@dataclass(frozen=True)
class Principal:
    """Who is asking: a key's prefix, its collection (None = every collection) and its scope."""

    key: str
    collection: str | None
    scope: str

    def sees(self, collection: str) -> bool:
        return self.collection is None or self.collection == collection

    def may(self, collection: str, scope: str) -> bool:
        return self.sees(collection) and SCOPES.index(self.scope) >= SCOPES.index(scope)

    @property
    def server_admin(self) -> bool:
        return self.collection is None and self.scope == "admin"


# Local use without keys (loopback only): one user who may do everything.
LOCAL = Principal("local", None, "admin")


@dataclass(frozen=True)
class KeyInfo:
    prefix: str
    collection: str | None
    scope: str
    created_at: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class KeyStore:
    def __init__(self, home: Path) -> None:
        self.path = home / KEYS_FILE

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.path, timeout=30)
        db.execute("CREATE TABLE IF NOT EXISTS keys (prefix TEXT PRIMARY KEY, digest TEXT NOT NULL, "
                   "collection TEXT, scope TEXT NOT NULL, created_at TEXT NOT NULL)")
        return db

    def create(self, collection: str | None, scope: str) -> str:
        """A new key, returned once: only its hash is kept."""
        if scope not in SCOPES:
            raise CiteragError(f"scope {scope!r}: expected one of {', '.join(SCOPES)}")
        if collection is None and scope != "admin":
            raise CiteragError("a key without --collection is a server admin key: use --scope admin")
        prefix = secrets.token_hex(4)
        token = f"{PREFIX}{prefix}_{secrets.token_urlsafe(24)}"
        with self._connect() as db:
            db.execute("INSERT INTO keys VALUES (?, ?, ?, ?, ?)",
                       (prefix, _digest(token), collection, scope, datetime.now(UTC).isoformat(timespec="seconds")))
        return token

    def list(self) -> list[KeyInfo]:
        if not self.path.exists():
            return []
        with self._connect() as db:
            return [KeyInfo(*row) for row in db.execute(
                "SELECT prefix, collection, scope, created_at FROM keys ORDER BY created_at, prefix")]

    def revoke(self, prefix: str) -> bool:
        with self._connect() as db:
            return db.execute("DELETE FROM keys WHERE prefix = ?", (prefix,)).rowcount > 0

    def revoke_collection(self, collection: str) -> int:
        """Revoke every key of a deleted collection: a collection created later under its name starts with none."""
        if not self.path.exists():
            return 0
        with self._connect() as db:
            return db.execute("DELETE FROM keys WHERE collection = ?", (collection,)).rowcount

    def verify(self, token: str) -> Principal | None:
        """The key's principal, or None for anything that is not a live key."""
        prefix = token[len(PREFIX):].partition("_")[0] if token.startswith(PREFIX) else ""
        row = None
        if prefix and self.path.exists():
            with self._connect() as db:
                row = db.execute("SELECT digest, collection, scope FROM keys WHERE prefix = ?", (prefix,)).fetchone()
        # Compared in constant time, and compared even when no row matched, so timing tells nothing.
        stored = row[0] if row else _digest("no such key")
        if hmac.compare_digest(stored, _digest(token)) and row is not None:
            return Principal(prefix, row[1], row[2])
        return None
