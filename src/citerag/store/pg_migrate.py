"""Versioned PostgreSQL schema: numbered SQL files in `pg_schema/`, applied in order in one transaction.

Plain SQL files rather than Alembic: citerag has no ORM models for Alembic to compare against, and a reader of
`pg_schema/` sees exactly what runs. An advisory lock makes concurrent starts (N API processes, M workers) apply
each file once; the others wait, then find it applied.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

_LOCK_KEY = 0x63697465726167  # "citerag": one advisory lock id for schema changes
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


def migrations() -> list[tuple[int, str, str]]:
    """(version, file name, SQL) of every shipped migration, in order."""
    folder = resources.files("citerag.store") / "pg_schema"
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    found.sort()
    return found


LATEST = migrations()[-1][0]


def applied_version(conn: Any) -> int:
    """The newest version applied to the database (0: none)."""
    exists = conn.execute("SELECT to_regclass('citerag_schema') IS NOT NULL").fetchone()[0]
    if not exists:
        return 0
    return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM citerag_schema").fetchone()[0])


def migrate(conn: Any) -> list[int]:
    """Apply what is missing, all in one transaction (all or nothing); the versions applied now."""
    done: list[int] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS citerag_schema (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                     " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        current = applied_version(conn)
        for version, name, sql in migrations():
            if version > current:
                conn.execute(sql)
                conn.execute("INSERT INTO citerag_schema (version, name) VALUES (%s, %s)", (version, name))
                done.append(version)
    return done


def ensure_current(conn: Any, where: str) -> None:
    """Bring the database up to this citerag's schema; one line (CiteragError) when it is newer than the code."""
    from citerag.errors import CiteragError

    found = applied_version(conn)
    if found > LATEST:
        raise CiteragError(f"the database at {where} has schema version {found}, this citerag knows up to "
                           f"{LATEST}: upgrade citerag")
    if found < LATEST:
        migrate(conn)
