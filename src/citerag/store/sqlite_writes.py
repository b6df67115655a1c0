"""Writing the embedded store: each change's statements, run inside the write transaction SqliteStore holds
(BEGIN IMMEDIATE ... COMMIT), each bumping the generation with its change-log row in that same transaction."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

import numpy as np

from citerag.errors import Superseded
from citerag.store.base import ChunkStats
from citerag.types import Chunk, Locator


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _locators_json(locators: list[Locator]) -> str:
    return json.dumps([loc.as_json() for loc in locators], separators=(",", ":"))


def _bump_generation(db: sqlite3.Connection, doc_id: int) -> None:
    """Next generation and its change-log row, inside the caller's write transaction."""
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
    db.execute("INSERT INTO changes SELECT CAST(value AS INTEGER), ? FROM meta WHERE key = 'generation'", (doc_id,))


def _next_document_id(db: sqlite3.Connection) -> int:
    """A document id never given before, inside the caller's write transaction.

    A rowid would be reused after the highest document is deleted, and links, traces and feedback issued for the
    deleted document would then open the new one. So ids come from a high-water counter, a meta key like the
    refusal rules' (no schema step: an older citerag reads the file as before). An index that has no counter yet
    seeds it once, in this same transaction, from every id it has known: the documents there and each document
    the change log names (deleted ones included, back to the log's start). The documents' own highest id is
    taken too, so that a document an older citerag added since cannot be handed out twice either."""
    row = db.execute("SELECT value FROM meta WHERE key = 'next_document_id'").fetchone()
    counter = int(row[0]) if row is not None else \
        int(db.execute("SELECT COALESCE(MAX(document_id), 0) + 1 FROM changes").fetchone()[0])
    doc_id = max(counter, int(db.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM documents").fetchone()[0]))
    db.execute("INSERT OR REPLACE INTO meta VALUES ('next_document_id', ?)", (str(doc_id + 1),))
    return doc_id


def add_pending(db: sqlite3.Connection, source_path: str, name: str, sha256: str) -> int:
    doc_id = _next_document_id(db)
    db.execute(
        "INSERT INTO documents (id, source_path, name, sha256, status, updated_at)"
        " VALUES (?, ?, ?, ?, 'pending', ?)", (doc_id, source_path, name, sha256, _now()))
    _bump_generation(db, doc_id)
    return doc_id


def save_indexed(db: sqlite3.Connection, doc_id: int, *, title: str, sha256: str, stamps: dict[str, Any],
                 canonical_text: str, warnings: list[str], chunks: list[Chunk], vecs: np.ndarray,
                 stats: ChunkStats, locators: list[Locator] | None, replaces: str | None) -> None:
    """The document's new version whole; `vecs` already checked (citerag.store.base.checked_vectors)."""
    if replaces is not None:
        row = db.execute("SELECT sha256 FROM documents WHERE id = ?", (doc_id,)).fetchone()
        if row is None or row[0] != replaces:
            raise Superseded(f"document {doc_id} no longer has the version being rebuilt")
    # Ids from a counter, never reused (a rowid would be, after the highest is deleted): search indexes
    # key vectors by chunk id, and an id meaning two chunks over time would need care in every index.
    first = int(db.execute("SELECT value FROM meta WHERE key = 'next_chunk_id'").fetchone()[0])
    rows = [(first + i, doc_id, i, c.text, c.content, c.section, c.start, c.end, stats.tokens[i],
             stats.header_tokens[i], vecs[i].tobytes()) for i, c in enumerate(chunks)]
    db.execute("UPDATE meta SET value = ? WHERE key = 'next_chunk_id'", (str(first + len(chunks)),))
    db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
    db.executemany(
        "INSERT INTO chunks (id, document_id, ordinal, text, content, section, start_offset, end_offset,"
        " tokens, header_tokens, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.execute(
        "UPDATE documents SET title = ?, sha256 = ?, status = 'indexed', error = NULL, warnings = ?,"
        " chunk_count = ?, stamps = ?, canonical_text = ?, locators = ?, updated_at = ? WHERE id = ?",
        (title, sha256, json.dumps(warnings), len(chunks), json.dumps(stamps, sort_keys=True),
         canonical_text, _locators_json(locators or []), _now(), doc_id))
    _bump_generation(db, doc_id)


def save_failed(db: sqlite3.Connection, doc_id: int, *, sha256: str, stamps: dict[str, Any], error: str) -> None:
    db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
    cur = db.execute(
        "UPDATE documents SET sha256 = ?, status = 'failed', error = ?, chunk_count = 0, stamps = ?,"
        " canonical_text = NULL, locators = '[]', updated_at = ? WHERE id = ?",
        (sha256, error, json.dumps(stamps, sort_keys=True), _now(), doc_id))
    if cur.rowcount:
        _bump_generation(db, doc_id)


def set_error(db: sqlite3.Connection, doc_id: int, error: str | None) -> None:
    # The reason only: status, chunks, text, stamps, sha256 and updated_at still describe the served version,
    # so a failed re-index neither hides the old version nor makes it look current.
    if db.execute("UPDATE documents SET error = ? WHERE id = ?", (error, doc_id)).rowcount:
        _bump_generation(db, doc_id)


def set_tags(db: sqlite3.Connection, doc_id: int, tags: list[str]) -> bool:
    if not db.execute("UPDATE documents SET tags = ? WHERE id = ?", (json.dumps(tags), doc_id)).rowcount:
        return False
    _bump_generation(db, doc_id)
    return True


def set_groups(db: sqlite3.Connection, doc_id: int, groups: list[str]) -> bool:
    if not db.execute("UPDATE documents SET read_groups = ? WHERE id = ?", (json.dumps(groups), doc_id)).rowcount:
        return False
    _bump_generation(db, doc_id)
    return True


def delete(db: sqlite3.Connection, doc_id: int) -> None:
    if db.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount:
        _bump_generation(db, doc_id)


def save_refusal_rule(db: sqlite3.Connection, encoder: str, rule: str) -> None:
    # A key of the meta table (key/value): no schema change, and an older citerag ignores it.
    db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"refusal_rule:{encoder}", rule))
