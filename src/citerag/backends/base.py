"""The backend bundle: everything a home or a collection keeps, made for its settings by one backend, so that the
choice between the embedded (SQLite, files) and the shared (PostgreSQL) backend is made once, by the store URL
(citerag.backends.open_backend), and each part is handed what it needs of the others (a pool, a connection, a
collection id, an Analyzer) by its bundle instead of reaching into them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # types only: opening a backend loads no more than the parts that are asked for
    from citerag.audit.base import AuditLog
    from citerag.catalog.base import Catalog
    from citerag.index.base import SearchBackend
    from citerag.jobs.job import Handler, IngestQueue
    from citerag.keystore.base import KeyStore
    from citerag.originals.base import Originals
    from citerag.settings import Settings
    from citerag.store.base import Store
    from citerag.trace.base import TraceStore


class Backend(Protocol):
    """One backend's factories. Each takes the settings of the home or collection it is for; none keeps state."""

    name: str  # "sqlite" | "postgresql", as Settings.store_scheme says

    def store(self, settings: Settings, create: bool = False) -> Store:
        """The collection's store, its schema brought up to date; `create` makes the collection (or index) when
        it is not there yet, else opening a missing one is a CiteragError."""
        ...

    def search(self, settings: Settings) -> SearchBackend:
        """The collection's search indexes, for its embedding model, vector index and `lexical` tokenisation."""
        ...

    def catalog(self, home: Settings) -> Catalog:
        """The collections of the home these settings name."""
        ...

    def key_store(self, settings: Settings) -> KeyStore:
        """The API keys of the home these settings name."""
        ...

    def audit(self, settings: Settings) -> AuditLog:
        """The audit trail of the home these settings name; one that keeps nothing when audit_retention_days = 0."""
        ...

    def originals(self, settings: Settings, store: Store) -> Originals:
        """The uploaded originals of the collection `settings` name; `store` is its open store."""
        ...

    def traces(self, settings: Settings, store: Store | None = None) -> TraceStore | None:
        """The collection's kept traces; None when it keeps none (trace_keep = 0). Given the collection's open
        `store`, a backend may borrow its connections."""
        ...

    def queue(self, settings: Settings, run: Handler) -> IngestQueue:
        """The home's ingestion queue: a thread of this process running each job through `run`, or (PostgreSQL,
        `queue = "procrastinate"`) jobs in the database that `citerag worker` processes run."""
        ...
