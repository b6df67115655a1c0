"""The embedded backend (store_url = sqlite:///DIR): one collection per directory, everything in files beside
its store. INDEX is the store's directory (Settings.sqlite_dir), HOME the home's index directory:

    store       INDEX/index.sqlite3              citerag.store.sqlite.SqliteStore
    search      INDEX/search/...                 citerag.index.local.LocalSearch (caught up from the change log)
    catalog     HOME/collections/NAME/           citerag.catalog.folder.FolderCatalog
    key store   HOME/keys.sqlite3                citerag.keystore.sqlite.SqliteKeyStore
    audit       HOME/audit.sqlite3               citerag.audit.sqlite.SqliteAuditLog
    originals   INDEX/files/SHA256               citerag.originals.folder.FolderOriginals
    traces      INDEX/traces.sqlite3             citerag.trace.store_sqlite.SqliteTraceStore
    queue       HOME/jobs/ (its journal)         citerag.jobs.thread.ThreadQueue
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from citerag.audit.base import AuditLog
    from citerag.catalog.base import Catalog
    from citerag.index.base import SearchBackend
    from citerag.jobs.job import Handler, IngestQueue
    from citerag.keystore.base import KeyStore
    from citerag.originals.base import Originals
    from citerag.settings import Settings
    from citerag.store.base import Store
    from citerag.trace.base import TraceStore


class EmbeddedBackend:
    name = "sqlite"

    def store(self, settings: Settings, create: bool = False) -> Store:
        from citerag.store.sqlite import SqliteStore

        return SqliteStore(settings.sqlite_dir, create=create)

    def search(self, settings: Settings) -> SearchBackend:
        from citerag.index.analyzer import Analyzer
        from citerag.index.local import LocalSearch

        return LocalSearch(settings.sqlite_dir, settings.embedding_model, settings.vector_index,
                           Analyzer(settings.lexical))

    def catalog(self, home: Settings) -> Catalog:
        from citerag.catalog.folder import FolderCatalog

        return FolderCatalog(home)

    def key_store(self, settings: Settings) -> KeyStore:
        from citerag.keystore.sqlite import SqliteKeyStore

        # HOME = the resolved index directory, as before there was a choice of backend.
        return SqliteKeyStore(settings.index_dir.expanduser().resolve())

    def audit(self, settings: Settings) -> AuditLog:
        from citerag.audit.base import NoAudit
        from citerag.audit.sqlite import SqliteAuditLog

        if settings.audit_retention_days == 0:
            return NoAudit()
        return SqliteAuditLog(settings.index_dir.expanduser().resolve(), settings.audit_retention_days)  # HOME

    def originals(self, settings: Settings, store: Store) -> Originals:
        from citerag.originals.folder import FolderOriginals

        return FolderOriginals(settings.sqlite_dir / "files", store)

    def traces(self, settings: Settings, store: Store | None = None) -> TraceStore | None:
        if settings.trace_keep == 0:
            return None
        from citerag.trace.store_sqlite import FILE_NAME, SqliteTraceStore

        return SqliteTraceStore(settings.sqlite_dir / FILE_NAME, settings.trace_keep)

    def queue(self, settings: Settings, run: Handler) -> IngestQueue:
        from citerag.jobs.thread import JOURNAL, ThreadQueue

        return ThreadQueue(run, settings.index_dir / JOURNAL)


EMBEDDED = EmbeddedBackend()
