"""The home: the one object every entry point uses (the CLI, `eval`, the HTTP service, the queue workers, the
tests). It holds the collections and what they share: encoders, rerankers, generators, caches and citation
counters, each loaded once per process whichever collection asks first.

    app = Citerag.open(load_settings())          # the settings' collection becomes the default one
    app.ingest([Path("docs")])
    answer = app.ask("How do I generate a locale?", AskOptions(mode="hybrid"))

A collection is a set of documents with its own settings and refusal rule, stored in its own store; one
Citerag serves several (the CLI's `--index DIR` is one). Two collections on the same encoder load it once and
share its query-vector cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

from citerag.app.collection import Collection
from citerag.app.models import AskOptions, CollectionStatus, SearchOptions
from citerag.app.shared import Shared
from citerag.app.stamps import keep_indexed_choices
from citerag.audit.base import AuditLog
from citerag.backends import open_backend
from citerag.catalog.base import COLLECTION_NAME as COLLECTION_NAME  # the name rule, for the entry points
from citerag.catalog.base import Catalog
from citerag.catalog.base import check_collection_name as check_collection_name  # (which never name the catalog)
from citerag.errors import CiteragError
from citerag.ingest.files import Discovered, IngestReport, Outcome, Source
from citerag.ingest.indexer import Progress
from citerag.jobs.job import Handler, IngestQueue
from citerag.keystore.base import KeyStore
from citerag.settings import Settings, load_settings
from citerag.store.base import Store
from citerag.trace import configure
from citerag.types import Answer, Document, SearchResult


def open_catalog(home: Settings) -> Catalog:
    """The collections of the home these settings name (`citerag keys create` checks one exists)."""
    return open_backend(home).catalog(home)


def open_queue(home: Settings, run: Handler) -> IngestQueue:
    """The home's ingestion queue, running each job through `run` where this process runs jobs at all."""
    return open_backend(home).queue(home, run)


def open_key_store(home: Settings) -> KeyStore:
    """The API keys of the home these settings name (the service's and `citerag keys`)."""
    return open_backend(home).key_store(home)


def open_audit_log(home: Settings) -> AuditLog:
    """The audit trail of the home these settings name (the service's `svc.audit` and `citerag audit`)."""
    return open_backend(home).audit(home)


class Citerag(Shared):
    """The collections of one process and the models and caches they share."""

    def __init__(self) -> None:
        super().__init__()
        self.collections: dict[str, Collection] = {}
        self.default: str | None = None
        self.catalog: Catalog | None = None  # set by open_home: collections by name, opened when first used

    @classmethod
    def open(cls, settings: Settings | None = None, *, create: bool = False) -> Citerag:
        """The application with the settings' collection open as its default one."""
        app = cls()
        app.open_collection(settings or load_settings(), create=create)
        return app

    @classmethod
    def open_home(cls, settings: Settings) -> Citerag:
        """A server's application: the home collection (the index folder) and every collection created beside it,
        each opened when first used."""
        app = cls()
        app.catalog = open_catalog(settings)
        app.open_collection(settings, create=True)
        return app

    def collection_names(self) -> list[str]:
        return self.catalog.names() if self.catalog else list(self.collections)

    def create_collection(self, name: str, changes: dict[str, Any]) -> Collection:
        if self.catalog is None:
            raise CiteragError("collections can only be created in a home (Citerag.open_home)")
        check_collection_name(name)
        with self._lock:
            settings = self.catalog.create(name, changes)
            try:
                return self.open_collection(settings, create=True)
            except BaseException:
                # A create that fails writes nothing: the catalog's entry (and any store begun) goes again. The
                # first error is the one to report.
                with suppress(Exception):
                    self.catalog.delete(name)
                raise

    def drop_collection(self, name: str) -> None:
        if self.catalog is None:
            raise CiteragError("collections can only be deleted in a home (Citerag.open_home)")
        check_collection_name(name)
        with self._lock:
            self.catalog.delete(name)  # refuses the home collection before anything is closed
            if name in self.collections:
                self.collections.pop(name).close()

    def open_collection(self, settings: Settings, *, create: bool = False) -> Collection:
        # The settings' own check is looser (an older rule); a name that could be read as a path opens nothing.
        check_collection_name(settings.collection)
        with self._lock:
            if settings.collection in self.collections:
                raise CiteragError(f"collection {settings.collection!r} is already open")
            configure(settings.otlp_endpoint)
            if self.encoder_threads is None:
                self.encoder_threads = settings.encoder_threads
            identity = self.catalog.identity(settings.collection) if self.catalog is not None else None
            store = open_backend(settings).store(settings, create)
            kept = keep_indexed_choices(settings, store)
            collection = Collection(self, kept.settings, store)
            collection.identity = identity
            collection.newer_defaults = kept.newer_defaults
            self.collections[settings.collection] = collection
            if self.default is None:
                self.default = settings.collection
            return collection

    def refresh(self, name: str) -> None:
        """Forget an open collection that another process deleted (and perhaps created again under its name), so
        that the next `collection(name)` opens what the catalog holds now. A worker calls it before each job."""
        if self.catalog is None:
            return
        with self._lock:
            open_ = self.collections.get(name)
            if open_ is None or name == self.default:
                return
            if self.catalog.identity(name) != open_.identity:
                self.collections.pop(name).close()

    def collection(self, name: str | None = None) -> Collection:
        key = name or self.default
        if name:
            check_collection_name(name)
        with self._lock:
            if key is not None and key not in self.collections and self.catalog and self.catalog.exists(key):
                return self.open_collection(self.catalog.settings(key), create=True)
        if key is None or key not in self.collections:
            raise CiteragError(f"no collection {key!r} is open")
        return self.collections[key]

    def close(self) -> None:
        for c in self.collections.values():
            c.close()
        self.collections.clear()
        self.default = None
        if self.catalog is not None:
            self.catalog.close()
        self.close_caches()

    def __enter__(self) -> Citerag:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # The default collection's operations, so that a single-collection caller never names one.
    def ingest(self, paths: Iterable[Path] | Discovered, progress: Progress | None = None) -> IngestReport:
        return self.collection().ingest(paths, progress)

    def index_document(self, source: Source) -> Outcome:
        return self.collection().index_document(source)

    def delete(self, document_id: int) -> None:
        self.collection().delete(document_id)

    def tag(self, document: str, tags: list[str]) -> Document:
        """Replace the tags of the document with this id, or ingested from this path."""
        return self._change(document, lambda store, doc_id: store.set_tags(doc_id, tags))

    def restrict(self, document: str, groups: list[str]) -> Document:
        """Replace the groups that may read the document with this id, or ingested from this path."""
        return self._change(document, lambda store, doc_id: store.set_groups(doc_id, groups))

    def _change(self, document: str, change: Callable[[Store, int], bool]) -> Document:
        collection = self.collection()
        doc = collection.document(int(document)) if document.isdecimal() else \
            collection.store.document_by_path(str(Path(document).resolve()))
        if doc is None or not change(collection.store, doc.id):
            raise CiteragError(f"no document {document!r} in {collection.location}")
        return collection.document(doc.id) or doc

    def retry_failed(self, progress: Progress | None = None) -> IngestReport:
        return self.collection().retry_failed(progress)

    def reindex_stale(self, progress: Progress | None = None) -> IngestReport:
        return self.collection().reindex_stale(progress)

    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult:
        return self.collection().search(query, options)

    def ask(self, question: str, options: AskOptions | None = None) -> Answer:
        return self.collection().ask(question, options)

    def status(self) -> CollectionStatus:
        return self.collection().status()
