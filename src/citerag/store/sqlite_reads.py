"""Reading the embedded store: rows as documents, the read transaction search uses (SqliteView) and the snapshot,
each inside a read transaction SqliteStore holds open (under WAL every statement in it sees the same commit)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from citerag.store.base import ChunkBatch, Snapshot
from citerag.types import Document, Facets, Locator, StoredChunk

DOC_COLUMNS = ("id, source_path, name, title, sha256, status, error, warnings, chunk_count, stamps, updated_at, tags,"
               " read_groups")


def document(row: tuple[Any, ...]) -> Document:
    return Document(id=row[0], source_path=row[1], name=row[2], title=row[3], sha256=row[4], status=row[5],
                    error=row[6], warnings=json.loads(row[7]), chunk_count=row[8],
                    stamps=json.loads(row[9]), updated_at=row[10], tags=json.loads(row[11]),
                    groups=json.loads(row[12]))


def locators(value: str) -> list[Locator]:
    """A locators column (JSON) as Locators."""
    return [Locator.from_json(d) for d in json.loads(value)]


_IN_BATCH = 500  # ids per `IN (...)`: well under SQLite's variable limit


def _batches(ids: Iterable[int]) -> Iterator[list[int]]:
    items = list(ids)
    for i in range(0, len(items), _IN_BATCH):
        yield items[i:i + _IN_BATCH]


_MODEL = "json_extract(d.stamps, '$.embedding_model')"


class SqliteView:
    """One read transaction on this thread's connection (see Store.view)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def changed_documents(self, since: int) -> list[int] | None:
        start = int(self._db.execute("SELECT value FROM meta WHERE key = 'log_start'").fetchone()[0])
        if since < start:
            return None
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT document_id FROM changes WHERE generation > ? ORDER BY document_id", (since,))]

    def indexed_chunks(self, embedding_model: str, document_ids: Sequence[int] | None = None,
                       batch: int = 20_000) -> Iterator[ChunkBatch]:
        sql = ("SELECT c.id, c.document_id, c.text, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id"
               f" WHERE d.status = 'indexed' AND {_MODEL} = ?")
        groups: Iterable[list[int] | None] = [None] if document_ids is None else _batches(sorted(document_ids))
        for group in groups:
            where = "" if group is None else f" AND c.document_id IN ({','.join('?' * len(group))})"
            cursor = self._db.execute(sql + where + " ORDER BY c.id", (embedding_model, *(group or [])))
            while rows := cursor.fetchmany(batch):
                dim = len(rows[0][3]) // 4
                yield ChunkBatch(ids=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                                 document_ids=np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)),
                                 texts=[r[2] for r in rows],
                                 vectors=np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32)
                                 .reshape(len(rows), dim))

    def chunks(self, ids: Iterable[int]) -> dict[int, StoredChunk]:
        out: dict[int, StoredChunk] = {}
        for group in _batches(ids):
            for row in self._db.execute(
                    "SELECT id, document_id, ordinal, text, content, section, start_offset, end_offset FROM chunks"
                    f" WHERE id IN ({','.join('?' * len(group))})", group):
                out[row[0]] = StoredChunk(*row)
        return out

    def documents(self, ids: Iterable[int]) -> dict[int, Document]:
        out: dict[int, Document] = {}
        for group in _batches(ids):
            for row in self._db.execute(f"SELECT {DOC_COLUMNS}, locators FROM documents"
                                        f" WHERE id IN ({','.join('?' * len(group))})", group):
                doc = document(row)
                doc.locators = locators(row[-1])
                out[doc.id] = doc
        return out

    def facets(self) -> list[Facets]:
        return [Facets(i, path, chunks, extractor, language, at, () if tags == "[]" else tuple(json.loads(tags)),
                       () if groups == "[]" else tuple(json.loads(groups)))
                for i, path, chunks, extractor, language, at, tags, groups in self._db.execute(
                    "SELECT id, source_path, chunk_count, json_extract(stamps, '$.extractor'),"
                    " json_extract(stamps, '$.language'), updated_at, tags, read_groups FROM documents"
                    " WHERE status = 'indexed' ORDER BY id")]

    def texts(self, ids: Iterable[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for group in _batches(ids):
            for doc_id, text in self._db.execute(
                    f"SELECT id, canonical_text FROM documents WHERE id IN ({','.join('?' * len(group))})"
                    " AND canonical_text IS NOT NULL", group):
                out[doc_id] = text
        return out

    def excluded_documents(self, embedding_model: str) -> int:
        return int(self._db.execute(
            f"SELECT count(*) FROM documents d WHERE d.status = 'indexed' AND {_MODEL} IS NOT ?",
            (embedding_model,)).fetchone()[0])


def snapshot(db: sqlite3.Connection, embedding_model: str) -> Snapshot:
    """Indexed documents of the model, their texts, chunks and vectors, inside the caller's read transaction."""
    # Documents, texts, chunks and vectors from one read transaction: a commit landing between two of
    # these queries would otherwise pair chunks with another version's text (torn reads).
    generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
    docs: dict[int, Document] = {}
    texts: dict[int, str] = {}
    excluded = 0
    for row in db.execute(f"SELECT {DOC_COLUMNS}, locators, canonical_text FROM documents"
                          " WHERE status = 'indexed' ORDER BY source_path"):
        doc = document(row)
        if doc.stamps.get("embedding_model") != embedding_model:
            excluded += 1
            continue
        doc.locators = locators(row[-2])
        docs[doc.id] = doc
        texts[doc.id] = row[-1]
    chunks, blobs = [], []
    for row in db.execute(
            "SELECT c.id, c.document_id, c.ordinal, c.text, c.content, c.section, c.start_offset,"
            " c.end_offset, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id"
            " WHERE d.status = 'indexed' ORDER BY c.document_id, c.ordinal"):
        if row[1] in docs:
            chunks.append(StoredChunk(*row[:8]))
            blobs.append(row[8])
    dim = len(blobs[0]) // 4 if blobs else 0
    vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim) if blobs \
        else np.zeros((0, 0), dtype=np.float32)
    return Snapshot(chunks, docs, vectors, excluded, texts=texts, generation=generation)
