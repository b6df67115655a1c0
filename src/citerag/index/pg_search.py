"""The PostgreSQL store's search indexes: tables in the same database (pgvector HNSW, BM25 postings), written in
the store's own transaction, so there is nothing to load, catch up or save: a search runs its queries inside the
view's REPEATABLE READ transaction (on a replica when one is configured) and sees exactly that commit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from citerag.index.base import SearchPair
from citerag.index.pg_bm25 import PgBm25Index
from citerag.index.pgvector import PgVectorIndex
from citerag.store.base import Store, StoreView


class DatabaseSearch:
    def __init__(self, embedding_model: str, vector_index: str) -> None:
        self.embedding_model = embedding_model
        self.approximate = vector_index == "hnsw"

    def reading(self) -> AbstractContextManager[object]:
        return nullcontext()  # nothing shared: each view's connection searches the tables as of its own commit

    @contextmanager
    def open(self, view: StoreView) -> Iterator[SearchPair]:
        conn: Any = getattr(view, "conn")  # noqa: B009 - a PostgresView; the Protocol does not name it
        collection_id: int = getattr(view, "collection_id")  # noqa: B009
        row = conn.execute("SELECT EXISTS (SELECT 1 FROM chunk_vectors WHERE collection_id = %s AND model = %s)",
                           (collection_id, self.embedding_model)).fetchone()
        yield SearchPair(PgVectorIndex(conn, collection_id, self.embedding_model, approximate=self.approximate),
                         PgBm25Index(conn, collection_id, self.embedding_model), empty=not row[0], applied=0)

    def persist(self, store: Store) -> None:
        """Nothing to save: the store wrote the index rows in the same transaction as the documents."""
