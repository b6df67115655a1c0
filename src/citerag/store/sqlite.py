"""The embedded default: one SQLite file in the index directory, vectors as float32 blobs.

Search is exact (a matrix product over every vector), which is what the evaluation measures and is
fast enough for tens of thousands of chunks; an approximate index belongs to the server backends.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from citerag.errors import CiteragError
from citerag.store.base import ChunkStats, Snapshot
from citerag.types import Chunk, Document, Locator, StoredChunk

DB_NAME = "index.sqlite3"
SCHEMA_VERSION = "2"  # 2: documents.locators

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    source_path TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    sha256 TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'indexed', 'failed')),
    error TEXT,
    warnings TEXT NOT NULL DEFAULT '[]',
    chunk_count INTEGER NOT NULL DEFAULT 0,
    stamps TEXT NOT NULL DEFAULT '{}',
    canonical_text TEXT,
    locators TEXT NOT NULL DEFAULT '[]',
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    content TEXT NOT NULL,
    section TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    header_tokens INTEGER NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id, ordinal);
"""

_DOC_COLUMNS = "id, source_path, name, title, sha256, status, error, warnings, chunk_count, stamps, updated_at"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _locators_json(locators: list[Locator]) -> str:
    return json.dumps([loc.as_json() for loc in locators], separators=(",", ":"))


def _document(row: tuple[Any, ...]) -> Document:
    return Document(id=row[0], source_path=row[1], name=row[2], title=row[3], sha256=row[4], status=row[5],
                    error=row[6], warnings=json.loads(row[7]), chunk_count=row[8],
                    stamps=json.loads(row[9]), updated_at=row[10])


class SqliteStore:
    def __init__(self, index_dir: Path, create: bool = False) -> None:
        self.path = index_dir / DB_NAME
        if index_dir.exists() and not index_dir.is_dir():
            raise CiteragError(f"index path {index_dir} is not a directory")
        if not self.path.exists():
            if not create:
                raise CiteragError(f"no index at {index_dir}: run `citerag ingest PATH` first")
            try:
                index_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CiteragError(f"cannot create index directory {index_dir}: {exc.strerror}") from exc
        try:
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.executescript(_SCHEMA)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            found = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise CiteragError(f"cannot open index at {index_dir}: {exc}") from exc
        if found != SCHEMA_VERSION:
            self._db.close()
            raise CiteragError(f"the index at {index_dir} has schema version {found}, this citerag needs "
                               f"{SCHEMA_VERSION}: delete the index directory and ingest again")

    def close(self) -> None:
        self._db.close()

    def _one(self, where: str, arg: Any) -> Document | None:
        row = self._db.execute(f"SELECT {_DOC_COLUMNS} FROM documents WHERE {where}", (arg,)).fetchone()
        return _document(row) if row else None

    def documents(self) -> list[Document]:
        rows = self._db.execute(f"SELECT {_DOC_COLUMNS} FROM documents ORDER BY source_path").fetchall()
        return [_document(r) for r in rows]

    def document(self, doc_id: int) -> Document | None:
        doc = self._one("id = ?", doc_id)
        if doc:
            doc.locators = self.locators(doc_id)
        return doc

    def locators(self, doc_id: int) -> list[Locator]:
        row = self._db.execute("SELECT locators FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return [Locator.from_json(d) for d in json.loads(row[0])] if row else []

    def document_by_path(self, source_path: str) -> Document | None:
        return self._one("source_path = ?", source_path)

    def add_pending(self, source_path: str, name: str, sha256: str) -> int:
        cur = self._db.execute(
            "INSERT INTO documents (source_path, name, sha256, status, updated_at) VALUES (?, ?, ?, 'pending', ?)",
            (source_path, name, sha256, _now()))
        return int(cur.lastrowid or 0)

    def save_indexed(self, doc_id: int, *, title: str, sha256: str, stamps: dict[str, Any],
                     canonical_text: str, warnings: list[str], chunks: list[Chunk], vectors: np.ndarray,
                     stats: ChunkStats, locators: list[Locator] | None = None) -> None:
        if len(chunks) != len(vectors):
            raise ValueError("one vector per chunk")
        vecs = np.ascontiguousarray(vectors, dtype=np.float32)
        if len(vecs) and not np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3):
            raise ValueError("vectors must be unit length: cosine distance is ||a-b||^2/2 only then")
        rows = [(doc_id, i, c.text, c.content, c.section, c.start, c.end, stats.tokens[i],
                 stats.header_tokens[i], vecs[i].tobytes()) for i, c in enumerate(chunks)]
        # One transaction: readers see the old version of the document or the new one, never half.
        with self._transaction():
            self._db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
            self._db.executemany(
                "INSERT INTO chunks (document_id, ordinal, text, content, section, start_offset, end_offset,"
                " tokens, header_tokens, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            self._db.execute(
                "UPDATE documents SET title = ?, sha256 = ?, status = 'indexed', error = NULL, warnings = ?,"
                " chunk_count = ?, stamps = ?, canonical_text = ?, locators = ?, updated_at = ? WHERE id = ?",
                (title, sha256, json.dumps(warnings), len(chunks), json.dumps(stamps, sort_keys=True),
                 canonical_text, _locators_json(locators or []), _now(), doc_id))

    def save_failed(self, doc_id: int, *, sha256: str, stamps: dict[str, Any], error: str) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
            self._db.execute(
                "UPDATE documents SET sha256 = ?, status = 'failed', error = ?, chunk_count = 0, stamps = ?,"
                " canonical_text = NULL, locators = '[]', updated_at = ? WHERE id = ?",
                (sha256, error, json.dumps(stamps, sort_keys=True), _now(), doc_id))

    def delete(self, doc_id: int) -> None:
        with self._transaction():
            self._db.execute("DELETE FROM documents WHERE id = ?", (doc_id,))

    def canonical_text(self, doc_id: int) -> str:
        row = self._db.execute("SELECT canonical_text FROM documents WHERE id = ?", (doc_id,)).fetchone()
        if not row or row[0] is None:
            raise CiteragError(f"document {doc_id} has no indexed text")
        return str(row[0])

    def chunk_stats(self) -> dict[int, ChunkStats]:
        out: dict[int, ChunkStats] = {}
        for doc_id, tokens, header in self._db.execute(
                "SELECT document_id, tokens, header_tokens FROM chunks ORDER BY document_id, ordinal"):
            stats = out.setdefault(doc_id, ChunkStats())
            stats.tokens.append(tokens)
            stats.header_tokens.append(header)
        return out

    def snapshot(self, embedding_model: str) -> Snapshot:
        docs = {d.id: d for d in self.documents() if d.status == "indexed"}
        usable = {i for i, d in docs.items() if d.stamps.get("embedding_model") == embedding_model}
        for i in usable:
            docs[i].locators = self.locators(i)
        chunks, blobs = [], []
        for row in self._db.execute(
                "SELECT c.id, c.document_id, c.ordinal, c.text, c.content, c.section, c.start_offset,"
                " c.end_offset, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id"
                " WHERE d.status = 'indexed' ORDER BY c.document_id, c.ordinal"):
            if row[1] in usable:
                chunks.append(StoredChunk(*row[:8]))
                blobs.append(row[8])
        dim = len(blobs[0]) // 4 if blobs else 0
        vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim) if blobs \
            else np.zeros((0, 0), dtype=np.float32)
        return Snapshot(chunks, {i: docs[i] for i in usable}, vectors, len(docs) - len(usable))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception (autocommit mode otherwise)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")
