"""The PostgreSQL store's search indexes: tables in the same database (pgvector HNSW, BM25 postings), written in
the store's own transaction, so there is nothing to load, catch up or save: a search runs its queries inside the
view's REPEATABLE READ transaction (on a replica when one is configured) and sees exactly that commit. What a
view's transaction is (its connection and collection id) is the store's: citerag.backends.postgres passes in
`inside`, which reads them off the store's own view."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from psycopg import Connection

from citerag.errors import CiteragError
from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import SearchPair
from citerag.index.pg_bm25 import PgBm25Index, lexical_key
from citerag.index.pgvector import PgVectorIndex
from citerag.store.base import Store, StoreView

# A store view's read transaction: its connection and the collection id its statements name.
ViewTransaction = Callable[[StoreView], tuple[Connection[Any], int]]


class DatabaseSearch:
    def __init__(self, embedding_model: str, vector_index: str, inside: ViewTransaction,
                 analyzer: Analyzer = REFERENCE) -> None:
        self.embedding_model = embedding_model
        self.approximate = vector_index == "hnsw"
        self.analyzer = analyzer
        self._inside = inside

    def reading(self) -> AbstractContextManager[object]:
        return nullcontext()  # nothing shared: each view's connection searches the tables as of its own commit

    @contextmanager
    def open(self, view: StoreView) -> Iterator[SearchPair]:
        conn, collection_id = self._inside(view)
        key = lexical_key(self.embedding_model, self.analyzer)
        row = conn.execute("SELECT EXISTS (SELECT 1 FROM chunk_vectors WHERE collection_id = %s AND model = %s),"
                           " EXISTS (SELECT 1 FROM lexical_chunks WHERE collection_id = %s AND model = %s)",
                           (collection_id, self.embedding_model, collection_id, key)).fetchone()
        assert row is not None  # two EXISTS: always one row
        if row[0] and not row[1]:
            # Postings are written at ingest, in the store's transaction: a search cannot rebuild them.
            raise CiteragError(f"this collection's BM25 postings were not made with the {self.analyzer.name!r} "
                               "tokenisation (setting `lexical`): ingest its documents again with it, or search "
                               "with the tokenisation they were indexed with")
        yield SearchPair(PgVectorIndex(conn, collection_id, self.embedding_model, approximate=self.approximate),
                         PgBm25Index(conn, collection_id, self.embedding_model, analyzer=self.analyzer),
                         empty=not row[0], applied=0)

    def persist(self, store: Store) -> None:
        """Nothing to save: the store wrote the index rows in the same transaction as the documents."""

    def close(self, store: Store) -> None:
        """Nothing runs in the background: PostgreSQL maintains its own indexes."""
