"""The application core: the one object every entry point uses (the CLI, `eval`, the tests; the HTTP service
and the queue workers to come). It owns the stores, the search state, the encoders, the rerankers and the
generators, and composes the pipeline once.

    app = Citerag.open(load_settings())          # the settings' collection becomes the default one
    app.ingest([Path("docs")])
    answer = app.ask("How do I generate a locale?", AskOptions(mode="hybrid"))

A collection is a set of documents with its own settings and refusal rule, stored in its own store; one
Citerag serves several (the CLI's `--index DIR` is one). Models are shared between collections: two
collections on the same encoder load it once and share its query-vector cache.

Per-request options (`SearchOptions`, `AskOptions`) default to the collection's settings and are validated
through them, so a bad value is a one-line SettingsError naming the field, never a silent NO ANSWER.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from citerag.answer.check import CitationMetrics
from citerag.answer.generators.base import Generator, GeneratorError
from citerag.catalog import Catalog
from citerag.errors import CiteragError, StoreUnavailable
from citerag.index.sync import IndexLockTimeout, SearchIndexes, index_dir
from citerag.index.sync import load as load_indexes
from citerag.index.sync import persist as persist_indexes
from citerag.ingest import (
    Discovered,
    Indexer,
    IngestReport,
    Outcome,
    Progress,
    Source,
    discover,
    display_path,
    is_stale,
)
from citerag.search import MODES, Retriever
from citerag.search.gate import gate  # the refusal rule, exported for the evaluation's threshold sweep
from citerag.settings import Settings, load_settings, set_in_config_file
from citerag.store import ChunkStats, Store, open_store_url
from citerag.types import Answer, Chunk, Document, Extracted, Hit, SearchResult, StoredChunk

# What a generator is built from: two collections that agree on these share one (a local LLM loads once).
_GENERATOR_SETTINGS = {"generator", "embedding_model", "llm_model_path", "llm_context", "llm_max_tokens",
                       "llm_temperature", "openai_base_url", "openai_model", "openai_api_key_env", "openai_stream",
                       "generator_timeout", "generator_retries"}
log = logging.getLogger("citerag")


@dataclass(frozen=True)
class SearchOptions:
    """What one search may change; None takes the collection's setting."""

    mode: str | None = None
    k: int | None = None
    rerank_model: str | None = None  # a cross-encoder folder; "" turns reranking off
    shortlist: int | None = None

    def changes(self) -> dict[str, Any]:
        return {"mode": self.mode, "k": self.k, "rerank_model": self.rerank_model, "rerank_shortlist": self.shortlist}


@dataclass(frozen=True)
class AskOptions(SearchOptions):
    """What one question may change besides the search: the refusal rule and the generator."""

    threshold: float | None = None
    max_sources: int | None = None
    generator: str | None = None

    def changes(self) -> dict[str, Any]:
        return {**super().changes(), "threshold": self.threshold, "max_sources": self.max_sources,
                "generator": self.generator}


@dataclass
class DocumentStatus:
    document: Document
    stale: bool

    def as_json(self) -> dict[str, Any]:
        d = self.document
        return {"id": d.id, "source_path": d.source_path, "name": d.name, "title": d.title, "status": d.status,
                "error": d.error, "warnings": d.warnings, "chunk_count": d.chunk_count, "stamps": d.stamps,
                "stale": self.stale, "updated_at": d.updated_at}


@dataclass
class CollectionStatus:
    collection: str
    location: str
    documents: list[DocumentStatus] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        counts = {s: sum(r.document.status == s for r in self.documents) for s in ("indexed", "failed", "pending")}
        counts["stale"] = sum(r.stale for r in self.documents)
        return counts

    def as_json(self) -> dict[str, Any]:
        return {"collection": self.collection, "index": self.location, "counts": self.counts,
                "documents": [r.as_json() for r in self.documents]}


def check_text(text: str, what: str) -> str:
    """A question or query as the pipeline needs it: not blank, and text (a terminal may hand over bytes that
    are not UTF-8 as surrogates, which no encoder or store accepts)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CiteragError(f"the {what} is not valid UTF-8") from None
    if not text.strip():
        raise CiteragError(f"the {what} is empty")
    return text


def _open_store(settings: Settings, create: bool) -> Store:
    return open_store_url(settings.store_url, create=create)


class _Lru:
    """A bounded, thread-safe map: the query-vector cache (a question costs an encoder call only once).

    Fifteen lines rather than functools.lru_cache, which cannot be filled from one batched encoder call
    (`embed_queries`); the caches issue replaces it with the shared cache backends."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> np.ndarray | None:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: tuple[str, str], value: np.ndarray) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)


class EmptyCollection(CiteragError):
    """A search or question on a collection with nothing indexed (a client error, not a refusal)."""


@dataclass(frozen=True)
class Accepted:
    """An upload taken in: its document (new and pending, or the one that already holds these bytes)."""

    document: Document
    existed: bool


class Citerag:
    """Shared models and caches, and the collections that use them."""

    def __init__(self, query_cache: int = 4096) -> None:
        self.collections: dict[str, Collection] = {}
        self.default: str | None = None
        self.catalog: Catalog | None = None  # set by open_home: collections by name, opened when first used
        self.citation_metrics = CitationMetrics()
        self._queries = _Lru(query_cache)
        self._models: dict[tuple[str, ...], Any] = {}
        self._lock = threading.RLock()

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
        app.catalog = Catalog(settings)
        app.open_collection(settings, create=True)
        return app

    def collection_names(self) -> list[str]:
        return self.catalog.names() if self.catalog else list(self.collections)

    def create_collection(self, name: str, changes: dict[str, Any]) -> Collection:
        if self.catalog is None:
            raise CiteragError("collections can only be created in a home (Citerag.open_home)")
        with self._lock:
            return self.open_collection(self.catalog.create(name, changes), create=True)

    def drop_collection(self, name: str) -> None:
        if self.catalog is None:
            raise CiteragError("collections can only be deleted in a home (Citerag.open_home)")
        with self._lock:
            self.catalog.delete(name)  # refuses the home collection before anything is closed
            if name in self.collections:
                self.collections.pop(name).close()

    def open_collection(self, settings: Settings, *, create: bool = False) -> Collection:
        with self._lock:
            if settings.collection in self.collections:
                raise CiteragError(f"collection {settings.collection!r} is already open")
            collection = Collection(self, settings, _open_store(settings, create))
            self.collections[settings.collection] = collection
            if self.default is None:
                self.default = settings.collection
            return collection

    def collection(self, name: str | None = None) -> Collection:
        key = name or self.default
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

    # Shared models: loaded once per process whichever collection asks first.
    def _model(self, key: tuple[str, ...], load: Callable[[], Any]) -> Any:
        with self._lock:
            if key not in self._models:
                self._models[key] = load()
            return self._models[key]

    def register_encoder(self, encoder: Any) -> None:
        """Use this encoder object for its `name` (a custom model, or a deterministic one in tests)."""
        with self._lock:
            self._models[("encoder", encoder.name)] = encoder

    def encoder(self, name: str) -> Any:
        from citerag.embed import load_encoder

        return self._model(("encoder", name), lambda: load_encoder(name))

    def reranker(self, name: str) -> Any:
        """The cross-encoder in folder `name`, or None when `name` is empty (reranking off)."""
        if not name:
            return None
        from citerag.search.rerank import load_reranker

        return self._model(("reranker", name), lambda: load_reranker(name))

    def generator(self, settings: Settings) -> Any:
        from citerag.answer.generators import make_generator

        key = ("generator", settings.model_dump_json(include=_GENERATOR_SETTINGS))
        return self._model(key, lambda: make_generator(settings, lambda: self.encoder(settings.embedding_model)))

    def query_vector(self, model: str, text: str) -> np.ndarray:
        vector = self._queries.get((model, text))
        if vector is None:
            self.embed_queries(model, [text])
            vector = self._queries.get((model, text))
        assert vector is not None
        return vector

    def embed_queries(self, model: str, texts: Sequence[str]) -> None:
        """Embed questions in one batch ahead of time (an evaluation's queries): later searches take them
        from the cache; the vectors are the ones a single query would get."""
        from citerag.embed import encode_queries

        todo = [t for t in dict.fromkeys(texts) if self._queries.get((model, t)) is None]
        if todo:
            for text, vector in zip(todo, encode_queries(self.encoder(model), todo), strict=True):
                self._queries.put((model, text), vector)


class Collection:
    """One collection: its settings, its store, and the search state over the store's current generation."""

    def __init__(self, app: Citerag, settings: Settings, store: Store) -> None:
        self.app = app
        self.settings = settings
        self.name = settings.collection
        self.store = store
        self.indexer = Indexer(store, settings, lambda: app.encoder(settings.embedding_model))
        self._search_lock = threading.Lock()
        self.write_lock = threading.Lock()  # a server's writers to this collection take turns (indexing, deleting)
        self._accept_lock = threading.Lock()
        self._indexes: SearchIndexes | None = None  # loaded on first use
        self._index_dir = index_dir(settings.sqlite_dir, settings.embedding_model, settings.vector_index)

    @property
    def location(self) -> str:
        """Where the documents live, as a person reads it (the index folder; a URL never shows its password)."""
        return str(self.settings.sqlite_dir) if self.settings.store_scheme == "sqlite" else self.settings.safe_url

    def close(self) -> None:
        self.store.close()

    # Writing
    # Each write ends by saving the search indexes (see persist_indexes), also when the write failed half way.
    def ingest(self, paths: Iterable[Path] | Discovered, progress: Progress | None = None) -> IngestReport:
        found = paths if isinstance(paths, Discovered) else discover(paths)
        try:
            return self.indexer.ingest(found, progress)
        finally:
            self.persist_indexes()

    def index_document(self, source: Source) -> Outcome:
        try:
            return self.indexer.index_document(source)
        finally:
            self.persist_indexes()

    def delete(self, document_id: int) -> None:
        if self.store.document(document_id) is None:
            raise CiteragError(f"no document {document_id} in collection {self.name!r}")
        self.store.delete(document_id)
        self.persist_indexes()

    def retry_failed(self, progress: Progress | None = None) -> IngestReport:
        try:
            return self.indexer.retry_failed(progress)
        finally:
            self.persist_indexes()

    def reindex_stale(self, progress: Progress | None = None) -> IngestReport:
        try:
            return self.indexer.reindex_stale(progress)
        finally:
            self.persist_indexes()

    def accept(self, source: Source) -> Accepted:
        """Take in an upload without indexing it yet: the document that already holds these bytes, or a new
        `pending` one (index it with index_document). A different file under the same key is the caller's
        business (replace it explicitly)."""
        sha = hashlib.sha256(source.data).hexdigest()
        with self._accept_lock:  # two uploads of one new name at once: the second finds the first's document
            doc = self.store.document_by_path(source.uri)
            if doc is not None:
                return Accepted(doc, doc.sha256 == sha)
            doc_id = self.store.add_pending(source.uri, source.display_name, sha)
        new = self.store.document(doc_id)
        assert new is not None
        return Accepted(new, False)

    # Reading
    def documents(self) -> list[Document]:
        return list(self.store.documents())

    def document(self, document_id: int) -> Document | None:
        return self.store.document(document_id)

    def is_stale(self, doc: Document) -> bool:
        """Indexed under stamps that differ from this collection's settings (`reindex --stale` rebuilds it)."""
        return self.indexer.stale(doc)

    def canonical_text(self, document_id: int) -> str:
        return self.store.canonical_text(document_id)

    def status(self) -> CollectionStatus:
        rows = [DocumentStatus(d, is_stale(d, self.indexer.stamps_for(d.name))) for d in self.store.documents()]
        return CollectionStatus(self.name, self.location, rows)

    def chunk_stats(self) -> dict[int, ChunkStats]:
        return dict(self.store.chunk_stats())

    def indexed_chunks(self) -> tuple[list[StoredChunk], dict[int, Document]]:
        """Every searchable chunk and its document, from one consistent snapshot (evaluation, training)."""
        snapshot = self.store.snapshot(self.settings.embedding_model)
        return list(snapshot.chunks), dict(snapshot.documents)

    def _search_indexes(self) -> SearchIndexes:
        if self._indexes is None:
            self._indexes = load_indexes(self._index_dir, self.settings.embedding_model, self.settings.vector_index)
        return self._indexes

    def persist_indexes(self) -> None:
        """Save the search indexes at the store's generation, so the next process opens them without rebuilding.

        Called after every write; a failure here loses nothing (the store has committed, and any process
        catches up from its change log), so it is logged, not raised."""
        with self._search_lock:
            try:
                self._indexes = persist_indexes(self._search_indexes(), self.store)
            except (OSError, IndexLockTimeout, StoreUnavailable) as exc:
                log.warning("search indexes in %s not saved (%s): they catch up from the store instead",
                            self._index_dir, getattr(exc, "strerror", None) or exc)

    @contextmanager
    def _retriever(self) -> Iterator[Retriever]:
        """A retriever over indexes caught up to one store view; hits and texts come from that view.

        One search at a time per collection: catching up mutates the indexes, and a scan takes milliseconds."""
        model = self.settings.embedding_model
        rebuilt = False
        with self._search_lock, self.store.view() as view:
            indexes = self._search_indexes()
            applied = indexes.catch_up(view)
            rebuilt = applied < 0
            if applied and (excluded := view.excluded_documents(model)):
                log.warning("%d document(s) indexed with another embedding model are not searched; run "
                            "`citerag reindex --stale`", excluded)
            if not len(indexes):
                if view.excluded_documents(model):
                    raise EmptyCollection(f"no documents in {self.location} were indexed with {model}: "
                                          "run `citerag reindex --stale`")
                raise EmptyCollection(f"the index at {self.location} has no indexed documents: "
                                      "run `citerag ingest PATH` first")
            yield Retriever(indexes.vector, indexes.lexical, view, lambda q: self.app.query_vector(model, q),
                            rrf_k=self.settings.rrf_k)
        if rebuilt:  # built from the whole store: save it so that the next process need not
            self.persist_indexes()

    def _ranked(self, query: str, settings: Settings, timings: dict[str, float],
                cited: Callable[[list[Hit]], list[Hit]]) -> tuple[list[Hit], dict[int, str]]:
        """The ranked hits (reranked when the settings say so) and the canonical texts of the documents of the
        hits `cited` picks, all from one store view."""
        from citerag.answer.pipeline import retrieve

        started = time.perf_counter()
        self.app.query_vector(settings.embedding_model, query)  # embedded (and cached) before taking the lock
        timings["embed"] = time.perf_counter() - started
        with self._retriever() as retriever:
            hits = retrieve(query, retriever, settings, self.app.reranker(settings.rerank_model), timings)
            return hits, retriever.texts({h.document.id for h in cited(hits)})

    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult:
        from citerag.answer.citations import cite

        check_text(query, "query")
        settings = self.settings.with_changes(**(options or SearchOptions()).changes())
        timings: dict[str, float] = {}
        hits, texts = self._ranked(query, settings, timings, lambda ranked: ranked[:settings.k])
        hits = hits[:settings.k]
        return SearchResult(hits, cite(hits, texts.__getitem__), timings)

    def ask(self, question: str, options: AskOptions | None = None) -> Answer:
        answer: Answer | None = None
        for kind, value in self.ask_events(question, options):
            if kind == "answer":
                answer = value
        assert answer is not None
        return answer

    def ask_events(self, question: str, options: AskOptions | None = None) -> Iterator[tuple[str, Any]]:
        """A question answered step by step (what a streaming client shows as it happens): ("retrieval", hits),
        then citerag.answer.pipeline.answer_events: ("citation", c)..., ("delta", text)..., ("answer", Answer)."""
        from citerag.answer.pipeline import answer_events

        check_text(question, "question")
        started = time.perf_counter()
        settings = self.settings.with_changes(**(options or AskOptions()).changes())
        timings: dict[str, float] = {}
        # Only what can be cited: the hits the gate passes (answer_events applies the same rule again).
        hits, texts = self._ranked(question, settings, timings,
                                   lambda ranked: gate(ranked, settings.threshold, settings.max_sources))
        yield "retrieval", hits
        # The generator runs after the read has ended: a slow model holds neither the index nor the database.
        for kind, value in answer_events(question, hits, self.app.generator(settings), texts.__getitem__, settings,
                                         timings, started):
            if kind == "answer" and value.check is not None:
                self.app.citation_metrics.record(value.check)
            yield kind, value

    def generator(self, options: AskOptions | None = None) -> Any:
        """The generator these options choose (an evaluation's LLM judge uses it directly)."""
        return self.app.generator(self.settings.with_changes(**(options or AskOptions()).changes()))

    def train_reranker(self, out: Path, pairs: int, epochs: int, seed: int,
                       log_line: Callable[[str], None] | None = None) -> Any:
        """Fine-tune a cross-encoder on this collection's chunks (see citerag.search.train_reranker)."""
        from citerag.search.train_reranker import TrainSettings, train_reranker

        chunks, _ = self.indexed_chunks()
        if not chunks:
            raise CiteragError(f"the index at {self.location} has no chunks indexed with "
                               f"{self.settings.embedding_model}: run `citerag ingest PATH` first")
        return train_reranker(chunks, out, TrainSettings(pairs=pairs, epochs=epochs, seed=seed), log=log_line)


def extract_file(path: Path, title: str | None = None) -> Extracted:
    """A file's canonical text, sections and locators, as the indexer would see them."""
    from citerag.extract import extractor_for

    extractor = extractor_for(path)
    if extractor is None:
        raise CiteragError(f"unsupported format: {display_path(path)}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CiteragError(f"cannot read {display_path(path)}: {exc.strerror}") from exc
    return extractor.extract(data, path, title=title)


def chunk_file(path: Path, strategy: str, target: int, overlap: int, title: str | None = None) -> list[Chunk]:
    """How one file is cut under a strategy: what `citerag chunk` shows."""
    from citerag.chunk import chunk_extracted

    return chunk_extracted(extract_file(path, title=title or path.stem), strategy, target, overlap)


__all__ = ["MODES", "Accepted", "AskOptions", "Citerag", "EmptyCollection",
           "Collection", "CollectionStatus", "Discovered", "DocumentStatus",
           "Generator", "GeneratorError", "IngestReport", "Outcome", "SearchOptions", "Settings", "Source",
           "check_text", "chunk_file", "discover", "extract_file", "gate", "load_settings", "set_in_config_file"]
