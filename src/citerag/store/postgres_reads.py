"""Reading the PostgreSQL store: rows as documents, the REPEATABLE READ view search uses (PostgresView) and the
snapshot read inside one, on the read pool (a replica when one is configured)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from citerag.errors import CiteragError
from citerag.store.base import ChunkBatch, Snapshot
from citerag.types import Document, Facets, Locator, StoredChunk

if TYPE_CHECKING:  # the [postgres] extra: store/postgres.py says what to install when it is missing
    import psycopg

DOC_COLUMNS = ("id, source_path, name, title, sha256, status, error, warnings, chunk_count, stamps, updated_at, tags,"
               " read_groups")


def document(row: Sequence[Any]) -> Document:
    return Document(id=row[0], source_path=row[1], name=row[2], title=row[3], sha256=row[4], status=row[5],
                    error=row[6], warnings=list(row[7]), chunk_count=row[8], stamps=dict(row[9]),
                    updated_at=row[10], tags=list(row[11]), groups=list(row[12]))


def array(value: Any) -> np.ndarray:
    """A pgvector value as float32 (the binary loader gives a Vector, the text one an array)."""
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


class PostgresView:
    """One REPEATABLE READ, read-only transaction (see Store.view); `conn` and `collection_id` are what the
    database-resident search indexes need to search inside it (citerag.backends.postgres hands them over)."""

    def __init__(self, conn: psycopg.Connection[Any], collection_id: int) -> None:
        self.conn = conn
        self.collection_id = collection_id
        row = conn.execute("SELECT generation FROM collections WHERE id = %s", (collection_id,)).fetchone()
        if row is None:
            raise CiteragError("the collection was deleted")
        self.generation = int(row[0])

    def changed_documents(self, since: int) -> list[int] | None:
        return [r[0] for r in self.conn.execute(
            "SELECT DISTINCT document_id FROM changes WHERE collection_id = %s AND generation > %s"
            " ORDER BY document_id", (self.collection_id, since))]

    def indexed_chunks(self, embedding_model: str, document_ids: Sequence[int] | None = None,
                       batch: int = 20_000) -> Iterator[ChunkBatch]:
        sql = ("SELECT c.id, c.document_id, c.text, v.embedding FROM chunks c"
               " JOIN documents d ON d.id = c.document_id"
               " JOIN chunk_vectors v ON v.collection_id = c.collection_id AND v.chunk_id = c.id"
               " WHERE c.collection_id = %s AND d.status = 'indexed' AND d.stamps->>'embedding_model' = %s")
        args: list[Any] = [self.collection_id, embedding_model]
        if document_ids is not None:
            sql += " AND c.document_id = ANY(%s)"
            args.append(list(document_ids))
        with self.conn.cursor(name="indexed_chunks") as cursor:  # server-side: a million rows never all in memory
            cursor.execute(sql + " ORDER BY c.id", args)
            while rows := cursor.fetchmany(batch):
                yield ChunkBatch(ids=np.array([r[0] for r in rows], dtype=np.int64),
                                 document_ids=np.array([r[1] for r in rows], dtype=np.int64),
                                 texts=[r[2] for r in rows],
                                 vectors=np.stack([array(r[3]) for r in rows]))

    def chunks(self, ids: Iterable[int]) -> dict[int, StoredChunk]:
        rows = self.conn.execute(
            "SELECT id, document_id, ordinal, text, content, section, start_offset, end_offset FROM chunks"
            " WHERE collection_id = %s AND id = ANY(%s)", (self.collection_id, list(ids))).fetchall()
        return {r[0]: StoredChunk(*r) for r in rows}

    def documents(self, ids: Iterable[int]) -> dict[int, Document]:
        out: dict[int, Document] = {}
        for row in self.conn.execute(f"SELECT {DOC_COLUMNS}, locators FROM documents"
                                     " WHERE collection_id = %s AND id = ANY(%s)", (self.collection_id, list(ids))):
            doc = document(row)
            doc.locators = [Locator.from_json(d) for d in row[-1]]
            out[doc.id] = doc
        return out

    def facets(self) -> list[Facets]:
        return [Facets(r[0], r[1], r[2], r[3], r[4], r[5], tuple(r[6]), tuple(r[7])) for r in self.conn.execute(
            "SELECT id, source_path, chunk_count, stamps->>'extractor', stamps->>'language', updated_at, tags,"
            " read_groups"
            " FROM documents WHERE collection_id = %s AND status = 'indexed' ORDER BY id", (self.collection_id,))]

    def texts(self, ids: Iterable[int]) -> dict[int, str]:
        return {r[0]: r[1] for r in self.conn.execute(
            "SELECT id, canonical_text FROM documents WHERE collection_id = %s AND id = ANY(%s)"
            " AND canonical_text IS NOT NULL", (self.collection_id, list(ids)))}

    def excluded_documents(self, embedding_model: str) -> int:
        return int(self.conn.execute(
            "SELECT count(*) FROM documents WHERE collection_id = %s AND status = 'indexed'"
            " AND stamps->>'embedding_model' IS DISTINCT FROM %s", (self.collection_id, embedding_model)
        ).fetchone()[0])  # type: ignore[index]

    def snapshot(self, embedding_model: str) -> Snapshot:
        """Indexed documents of the model, their texts, chunks and vectors, as of this view's commit."""
        conn = self.conn
        docs: dict[int, Document] = {}
        texts: dict[int, str] = {}
        excluded = 0
        for row in conn.execute(f"SELECT {DOC_COLUMNS}, locators, canonical_text FROM documents"
                                " WHERE collection_id = %s AND status = 'indexed' ORDER BY source_path",
                                (self.collection_id,)):
            doc = document(row)
            if doc.stamps.get("embedding_model") != embedding_model:
                excluded += 1
                continue
            doc.locators = [Locator.from_json(d) for d in row[-2]]
            docs[doc.id] = doc
            texts[doc.id] = row[-1]
        chunks, vectors = [], []
        for row in conn.execute(
                "SELECT c.id, c.document_id, c.ordinal, c.text, c.content, c.section, c.start_offset,"
                " c.end_offset, v.embedding FROM chunks c"
                " JOIN chunk_vectors v ON v.collection_id = c.collection_id AND v.chunk_id = c.id"
                " WHERE c.collection_id = %s ORDER BY c.document_id, c.ordinal", (self.collection_id,)):
            if row[1] in docs:
                chunks.append(StoredChunk(*row[:8]))
                vectors.append(array(row[8]))
        matrix = np.stack(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)
        return Snapshot(chunks, docs, matrix, excluded, texts=texts, generation=self.generation)
