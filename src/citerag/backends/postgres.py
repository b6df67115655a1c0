"""The shared backend (store_url = postgresql://...): every collection of a home in one database, so that every
API process and worker on every machine sees the same rows. What each part needs of the others is wired here:

    store       collections, documents, chunks     citerag.store.postgres.PostgresStore (a write pool, a read
                                                   pool on store_read_url), writing the search rows below in
                                                   its own transaction
    search      chunk_vectors, lexical_chunks,     citerag.index.pg_search.DatabaseSearch inside the store's
                postings                           view (its connection and collection id)
    catalog     collections.settings               citerag.catalog.postgres.PostgresCatalog, deleting through
                                                   the store's drop_collection
    key store   api_keys                           citerag.keystore.postgres.PostgresKeyStore
    audit       audit_events                       citerag.audit.postgres.PostgresAuditLog
    originals   originals                          citerag.originals.postgres.PostgresOriginals on the store's
                                                   pool and collection id
    traces      traces                             citerag.trace.store_postgres.PostgresTraceStore on the
                                                   store's pool and collection id
    queue       procrastinate_jobs                 citerag.jobs.procrastinate.ProcrastinateQueue with
                                                   queue = "procrastinate" (else the thread queue)

The parts' modules are imported when first asked for: each says in one line which extra is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from citerag.errors import CiteragError

if TYPE_CHECKING:
    import psycopg

    from citerag.audit.base import AuditLog
    from citerag.catalog.base import Catalog
    from citerag.index.analyzer import Analyzer
    from citerag.index.base import SearchBackend
    from citerag.jobs.job import Handler, IngestQueue
    from citerag.keystore.base import KeyStore
    from citerag.originals.base import Originals
    from citerag.settings import Settings
    from citerag.store.base import Store, StoreView
    from citerag.store.postgres import PostgresStore, SearchRows
    from citerag.trace.base import TraceStore


def search_rows(analyzer: Analyzer) -> Callable[[psycopg.Connection[Any], int, str], Sequence[SearchRows]]:
    """The search indexes' rows a PostgreSQL store writes beside a document's chunks, in its transaction:
    pgvector's vectors and the BM25 postings in the `analyzer`'s tokenisation."""
    from citerag.index.pg_bm25 import PgBm25Index
    from citerag.index.pgvector import PgVectorIndex

    def rows(conn: psycopg.Connection[Any], collection_id: int, model: str) -> Sequence[SearchRows]:
        return PgVectorIndex(conn, collection_id, model), PgBm25Index(conn, collection_id, model, analyzer=analyzer)

    return rows


def view_transaction(view: StoreView) -> tuple[psycopg.Connection[Any], int]:
    """The read transaction a PostgreSQL store's view holds: its connection and collection id."""
    from citerag.store.postgres_reads import PostgresView

    if not isinstance(view, PostgresView):
        raise CiteragError(f"the database search reads a PostgreSQL store's view, not a {type(view).__name__}")
    return view.conn, view.collection_id


def open_store(url: str, collection: str, *, create: bool = False, read_url: str = "",
               lexical: str = "reference") -> PostgresStore:
    """A PostgreSQL store wired to write its search rows with the `lexical` tokenisation."""
    from citerag.index.analyzer import Analyzer
    from citerag.store.postgres import PostgresStore

    return PostgresStore(url, collection, create=create, read_url=read_url,
                         search_rows=search_rows(Analyzer(lexical)))


def _borrowed(store: Store | None) -> PostgresStore | None:
    """The collection's open PostgreSQL store, when that is what `store` is: its pool and id are lent out."""
    from citerag.store.postgres import PostgresStore

    return store if isinstance(store, PostgresStore) else None


class PostgresBackend:
    name = "postgresql"

    def store(self, settings: Settings, create: bool = False) -> Store:
        return open_store(settings.store_url, settings.collection, create=create, read_url=settings.store_read_url,
                          lexical=settings.lexical)

    def search(self, settings: Settings) -> SearchBackend:
        from citerag.index.analyzer import Analyzer
        from citerag.index.pg_search import DatabaseSearch

        return DatabaseSearch(settings.embedding_model, settings.vector_index, view_transaction,
                              Analyzer(settings.lexical))

    def catalog(self, home: Settings) -> Catalog:
        from citerag.catalog.postgres import PostgresCatalog

        def drop(name: str) -> None:
            # The collection's rows, search rows included, in one transaction (the store's drop_collection).
            store = open_store(home.store_url, name)
            try:
                store.drop_collection()
            finally:
                store.close()

        return PostgresCatalog(home, drop)

    def key_store(self, settings: Settings) -> KeyStore:
        from citerag.keystore.postgres import PostgresKeyStore

        return PostgresKeyStore(settings.store_url, settings.safe_url)

    def audit(self, settings: Settings) -> AuditLog:
        from citerag.audit.base import NoAudit

        if settings.audit_retention_days == 0:
            return NoAudit()
        from citerag.audit.postgres import PostgresAuditLog

        return PostgresAuditLog(settings.store_url, settings.audit_retention_days, settings.safe_url)

    def originals(self, settings: Settings, store: Store) -> Originals:
        from citerag.originals.postgres import PostgresOriginals

        own = _borrowed(store)
        if own is None:
            raise CiteragError(f"originals in PostgreSQL need the collection's PostgreSQL store, not {store!r}")
        return PostgresOriginals(own.pool.connection, own.collection_id, settings.safe_url)

    def traces(self, settings: Settings, store: Store | None = None) -> TraceStore | None:
        """Given the collection's open store, its pool and collection id are borrowed (no connections of its
        own). Without one, the trace store opens a small pool and finds the collection by name when it first
        needs it; until the collection exists, nothing is kept and nothing is found."""
        if settings.trace_keep == 0:
            return None
        from citerag.trace.store_postgres import PostgresTraceStore

        own = _borrowed(store)
        if own is not None:
            return PostgresTraceStore(own.pool, settings.trace_keep, collection_id=own.collection_id)
        return PostgresTraceStore.connect(settings.store_url, settings.collection, settings.trace_keep,
                                          where=settings.safe_url)

    def queue(self, settings: Settings, run: Handler) -> IngestQueue:
        if settings.queue == "procrastinate":  # the workers run the jobs; this process only defers them
            from citerag.jobs.procrastinate import ProcrastinateQueue

            return ProcrastinateQueue(settings)
        from citerag.jobs.thread import JOURNAL, ThreadQueue

        return ThreadQueue(run, settings.index_dir / JOURNAL)


POSTGRES = PostgresBackend()
