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

import dataclasses
import hashlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from citerag.answer.check import CitationMetrics
from citerag.answer.generators.base import Generator, GeneratorError
from citerag.cache import Cache, open_cache
from citerag.catalog import Catalog, open_catalog
from citerag.errors import CiteragError
from citerag.index import open_search
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
from citerag.originals import read_original
from citerag.refusal import RefusalRule
from citerag.search import MODES, Retriever
from citerag.search.gate import gate  # the refusal rule, exported for the evaluation's threshold sweep
from citerag.search.retriever import hits_from_rows
from citerag.settings import DEFAULT_ENCODER, Settings, load_settings, set_in_config_file
from citerag.store import ChunkStats, Store, open_store_url
from citerag.trace import OPERATION, configure, current_trace_id, hit_attributes, sink, traced_events, tracer
from citerag.trace.setup import Sink
from citerag.trace.store import open_trace_store
from citerag.types import Answer, Chunk, Document, Extracted, Hit, SearchResult, StoredChunk, answer_from_dict

# What a generator is built from: two collections that agree on these share one (a local LLM loads once).
# What a retrieval's result depends on besides the store's generation; an answer also on the gate and the generator.
_RETRIEVAL_SETTINGS = {"mode", "k", "rrf_k", "rerank_model", "rerank_shortlist", "embedding_model", "vector_index",
                      "lexical"}
_ANSWER_SETTINGS = {"threshold", "max_sources", "refusal"}  # | _GENERATOR_SETTINGS, added below
_GENERATOR_SETTINGS = {"generator", "embedding_model", "llm_model_path", "llm_context", "llm_max_tokens",
                       "llm_temperature", "openai_base_url", "openai_model", "openai_api_key_env", "openai_stream",
                       "generator_timeout", "generator_retries"}
_ANSWER_SETTINGS |= _GENERATOR_SETTINGS
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
class RefusalStatus:
    """Which rule refuses questions: the calibrated cut (`rule`) or the threshold setting, and why."""

    rule: str  # "calibrated" | "threshold"
    threshold: float  # the cut in use
    reason: str  # why this rule (no calibration yet, set explicitly, ...)
    calibration: RefusalRule | None = None  # the collection's calibration for its encoder, used or not

    def as_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "threshold": self.threshold, "reason": self.reason,
                "calibration": None if self.calibration is None else dataclasses.asdict(self.calibration)}


@dataclass
class CollectionStatus:
    collection: str
    location: str
    documents: list[DocumentStatus] = field(default_factory=list)
    refusal: RefusalStatus | None = None

    @property
    def counts(self) -> dict[str, int]:
        counts = {s: sum(r.document.status == s for r in self.documents) for s in ("indexed", "failed", "pending")}
        counts["stale"] = sum(r.stale for r in self.documents)
        return counts

    def as_json(self) -> dict[str, Any]:
        return {"collection": self.collection, "index": self.location, "counts": self.counts,
                "refusal": None if self.refusal is None else self.refusal.as_json(),
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
    return open_store_url(settings.store_url, create=create, collection=settings.collection,
                          read_url=settings.store_read_url, lexical=settings.lexical)


class EmptyCollection(CiteragError):
    """A search or question on a collection with nothing indexed (a client error, not a refusal)."""


@dataclass(frozen=True)
class Accepted:
    """An upload taken in: its document (new and pending, or the one that already holds these bytes)."""

    document: Document
    existed: bool


class Citerag:
    """Shared models and caches, and the collections that use them."""

    def __init__(self) -> None:
        self.collections: dict[str, Collection] = {}
        self.cache_counts: Counter[tuple[str, str]] = Counter()  # (level, "hit" | "miss")
        self.default: str | None = None
        self.catalog: Catalog | None = None  # set by open_home: collections by name, opened when first used
        self.citation_metrics = CitationMetrics()
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
        app.catalog = open_catalog(settings)
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
            configure(settings.otlp_endpoint)
            identity = self.catalog.identity(settings.collection) if self.catalog is not None else None
            collection = Collection(self, settings, _open_store(settings, create))
            collection.identity = identity
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
        for key in [k for k in self._models if k[0] == "cache"]:
            self._models.pop(key).close()

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

    def cache(self, url: str) -> Cache:
        """The cache backend at `url` ("memory" or redis://...), opened once per process."""
        cache: Cache = self._model(("cache", url), lambda: open_cache(url))
        return cache

    def cached(self, level: str, url: str, key: str, ttl: float) -> bytes | None:
        """The entry under `key`, counted as a hit or a miss of `level`; None when the level is off (ttl 0)."""
        if ttl <= 0:
            return None
        value = self.cache(url).get(key)
        self.cache_counts[(level, "miss" if value is None else "hit")] += 1
        return value

    def query_vector(self, model: str, text: str, cache_url: str = "memory", ttl: float = 86400.0,
                     hits: dict[str, bool] | None = None) -> np.ndarray:
        """The question's vector, from the query-embedding cache when it holds it (`hits["query"]` says)."""
        key = cache_key("query", {"model": model, "text": text})
        blob = self.cached("query", cache_url, key, ttl)
        if hits is not None:
            hits["query"] = blob is not None
        if blob is not None:
            return np.frombuffer(blob, dtype=np.float32)
        return self.embed_queries(model, [text], cache_url, ttl)[0]

    def embed_queries(self, model: str, texts: Sequence[str], cache_url: str = "memory",
                      ttl: float = 86400.0) -> np.ndarray:
        """Embed questions in one batch (an evaluation's queries, ahead of time) and cache them: later searches
        take them from the cache; the vectors are the ones a single query would get."""
        from citerag.embed import encode_queries

        vectors = np.asarray(encode_queries(self.encoder(model), list(texts)), dtype=np.float32)
        if ttl > 0:
            for text, vector in zip(texts, vectors, strict=True):
                self.cache(cache_url).set(cache_key("query", {"model": model, "text": text}), vector.tobytes(), ttl)
        return vectors


def cache_key(level: str, parts: dict[str, Any]) -> str:
    """A key naming everything the cached value depends on, hashed (a question never appears in Redis' keys)."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()
    return f"citerag:v1:{level}:{digest}"


class Collection:
    """One collection: its settings, its store, and the search state over the store's current generation."""

    def __init__(self, app: Citerag, settings: Settings, store: Store) -> None:
        self.app = app
        self.settings = settings
        self.name = settings.collection
        self.store = store
        self.indexer = Indexer(store, settings, lambda: app.encoder(settings.embedding_model))
        self.write_lock = threading.Lock()  # a server's writers to this collection take turns (indexing, deleting)
        self._accept_lock = threading.Lock()
        self.search_backend = open_search(settings)
        self.identity: object | None = None  # the catalog's identity of it when opened (see Citerag.refresh)
        # What the last automatic calibration did (the CLI reports it): the rule fitted, or why none was.
        self.last_calibration: RefusalRule | CiteragError | None = None
        # Traces beside a sqlite store, or in a PostgreSQL store's database through its pool (None: trace_keep 0).
        self.traces = open_trace_store(settings, store)

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
            with sink(self._trace_sink(None)):
                report = self.indexer.ingest(found, progress)
        finally:
            self.persist_indexes()
        if report.indexed or report.removed:  # a run that changed documents recalibrates the refusal rule
            self._recalibrate(always=True)
        return report

    def index_document(self, source: Source) -> Outcome:
        try:
            with sink(self._trace_sink(None)):
                outcome = self.indexer.index_document(source)
        finally:
            self.persist_indexes()
        # An upload recalibrates only when there is no rule yet or the document count moved by > 10 %: a fit
        # embeds ~400 questions, too much to repeat after every upload of a large collection.
        self._recalibrate(always=False)
        return outcome

    # The refusal rule
    def refusal_rule(self) -> RefusalRule | None:
        """The collection's calibrated rule for its encoder, or None when it has none."""
        text = self.store.refusal_rule(self.settings.embedding_model)
        return None if text is None else RefusalRule.from_json(text)

    def calibrate(self) -> RefusalRule:
        """Fit the refusal rule on synthetic questions from this collection's chunks and the shipped bank of
        out-of-domain questions (citerag.refusal.calibrate), and keep it with the store. Raises TooSmall (a
        CiteragError) when the collection is too small to make enough questions; EmptyCollection when empty."""
        from citerag.refusal.calibrate import fit_rule

        chunks, documents = self.indexed_chunks()
        if not chunks:
            raise EmptyCollection(f"the index at {self.location} has no indexed documents: "
                                  "run `citerag ingest PATH` first")
        rule = fit_rule(chunks, len(documents), self.settings.embedding_model, self._best_distances)
        self.store.save_refusal_rule(rule.encoder, rule.to_json())
        self.last_calibration = rule
        return rule

    def _best_distances(self, queries: Sequence[str]) -> list[float]:
        """Each question's smallest cosine distance to a chunk (dense search), without traces or caches of
        results: calibration questions are no user's questions."""
        s = self.settings
        vectors = self.app.embed_queries(s.embedding_model, queries, s.cache_url, s.cache_query_ttl)
        out = []
        with self._retriever() as retriever:
            assert retriever.vector is not None  # _retriever refuses an empty collection
            for vector in vectors:
                _, similarity = retriever.vector.search(vector, 1)
                out.append(1.0 - float(similarity[0]) if len(similarity) else 2.0)
        return out

    def _recalibrate(self, always: bool) -> None:
        """After a write: fit the rule again (always, or when citerag.refusal.calibrate.needs_refit says). A
        collection too small to calibrate, or a failure, keeps the rule it had; the write itself stands."""
        from citerag.refusal.calibrate import TooSmall, needs_refit

        try:
            if not always:
                indexed = sum(d.status == "indexed" for d in self.store.documents())
                if indexed == 0 or not needs_refit(self.refusal_rule(), indexed, self.settings.embedding_model):
                    return
            self.calibrate()
        except CiteragError as exc:
            self.last_calibration = exc
            # A small collection keeping the threshold is expected, not a fault (the CLI says so in its report).
            log.log(logging.INFO if isinstance(exc, TooSmall) else logging.WARNING,
                    "refusal rule not calibrated: %s", exc)

    def delete(self, document_id: int) -> None:
        if self.store.document(document_id) is None:
            raise CiteragError(f"no document {document_id} in collection {self.name!r}")
        self.store.delete(document_id)
        self.persist_indexes()

    def retry_failed(self, progress: Progress | None = None) -> IngestReport:
        try:
            with sink(self._trace_sink(None)):
                return self.indexer.retry_failed(progress, self._upload)
        finally:
            self.persist_indexes()

    def reindex_stale(self, progress: Progress | None = None) -> IngestReport:
        try:
            with sink(self._trace_sink(None)):
                return self.indexer.reindex_stale(progress, self._upload)
        finally:
            self.persist_indexes()

    def _upload(self, doc: Document) -> bytes | None:
        return read_original(self, doc)

    def fail_document(self, document_id: int, sha256: str, name: str, reason: str) -> Outcome:
        """A document whose indexing failed outside index_document (a crashed worker, an outage) ends `failed`
        with the reason; an indexed one keeps serving its version, with the reason beside it."""
        outcome = self.indexer.fail_document(document_id, name, sha256, reason)
        self.persist_indexes()
        return outcome

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
        return CollectionStatus(self.name, self.location, rows, self.refusal_status(self.settings))

    def refusal_status(self, settings: Settings) -> RefusalStatus:
        """The rule that refuses questions under these settings (the collection's, or a request's)."""
        rule = self.refusal_rule()
        if settings.refusal == "threshold":
            return RefusalStatus("threshold", settings.threshold, "refusal = \"threshold\"", rule)
        if "threshold" in settings.model_fields_set:
            return RefusalStatus("threshold", settings.threshold, "a threshold was set explicitly", rule)
        if rule is None:
            return RefusalStatus("threshold", settings.threshold,
                                 f"no calibration for {settings.embedding_model} yet (`citerag calibrate`)")
        return RefusalStatus("calibrated", rule.threshold, "calibrated for this collection", rule)

    def chunk_stats(self) -> dict[int, ChunkStats]:
        return dict(self.store.chunk_stats())

    def indexed_chunks(self) -> tuple[list[StoredChunk], dict[int, Document]]:
        """Every searchable chunk and its document, from one consistent snapshot (evaluation, training)."""
        snapshot = self.store.snapshot(self.settings.embedding_model)
        return list(snapshot.chunks), dict(snapshot.documents)

    def persist_indexes(self) -> None:
        """After every write: the search indexes made durable for the next process (embedded store: saved beside
        it; a server store wrote them in the write's own transaction). Never raises: nothing is lost."""
        self.search_backend.persist(self.store)

    @contextmanager
    def _retriever(self, embed: Callable[[str], np.ndarray] | None = None) -> Iterator[Retriever]:
        """A retriever over indexes as of one store view; hits and texts come from that view."""
        model = self.settings.embedding_model
        rebuilt = False
        with self.search_backend.reading(), self.store.view() as view, self.search_backend.open(view) as indexes:
            rebuilt = indexes.applied < 0
            if indexes.applied and (excluded := view.excluded_documents(model)):
                log.warning("%d document(s) indexed with another embedding model are not searched; run "
                            "`citerag reindex --stale`", excluded)
            if indexes.empty:
                if view.excluded_documents(model):
                    raise EmptyCollection(f"no documents in {self.location} were indexed with {model}: "
                                          "run `citerag reindex --stale`")
                raise EmptyCollection(f"the index at {self.location} has no indexed documents: "
                                      "run `citerag ingest PATH` first")
            yield Retriever(indexes.vector, indexes.lexical, view,
                            embed or (lambda q: self.app.query_vector(model, q, self.settings.cache_url,
                                                                      self.settings.cache_query_ttl)),
                            rrf_k=self.settings.rrf_k)
        if rebuilt:  # built from the whole store: save it so that the next process need not
            self.persist_indexes()

    def _key(self, level: str, settings: Settings, generation: int, text: str) -> str:
        """The cache key of a retrieval or an answer: the store and collection, the generation (bumped by every
        change), the settings that change the result, and the text asked."""
        fields = _RETRIEVAL_SETTINGS | (_ANSWER_SETTINGS if level == "answer" else set())
        return cache_key(level, {"store": settings.store_url, "collection": self.name, "generation": generation,
                                 "settings": settings.model_dump(include=fields), "text": text})

    def _ranked(self, query: str, settings: Settings, timings: dict[str, float], cache: dict[str, bool],
                cited: Callable[[list[Hit]], list[Hit]]) -> tuple[list[Hit], dict[int, str]]:
        """The ranked hits (reranked when the settings say so) and the canonical texts of the documents of the
        hits `cited` picks, all from one store view; from the retrieval cache when it holds them."""
        from citerag.answer.pipeline import retrieve

        started = time.perf_counter()
        model, url = settings.embedding_model, settings.cache_url
        # Embedded (or taken from the cache) before the search lock: a slow encoder holds nothing.
        with tracer.start_as_current_span("citerag.embed_query") as span:
            vector = self.app.query_vector(model, query, url, settings.cache_query_ttl, cache)
            span.set_attributes({"citerag.cache.hit": cache.get("query", False), "citerag.embedding_model": model})
        timings["embed"] = time.perf_counter() - started

        def embed(text: str) -> np.ndarray:  # the retriever asks for the question just embedded
            return vector if text == query else self.app.query_vector(model, text, url, settings.cache_query_ttl)

        with self._retriever(embed) as retriever, \
                tracer.start_as_current_span("citerag.retrieve") as span:
            key = self._key("retrieval", settings, retriever.view.generation, query)
            blob = self.app.cached("retrieval", url, key, settings.cache_retrieval_ttl)
            cache["retrieval"] = blob is not None
            if blob is not None:
                hits = hits_from_rows(retriever.view, json.loads(blob))
            else:
                hits = retrieve(query, retriever, settings, self.app.reranker(settings.rerank_model), timings)
                if settings.cache_retrieval_ttl > 0:
                    rows = [[h.chunk.id, h.rank, h.score, h.cosine_distance, h.exact] for h in hits]
                    self.app.cache(url).set(key, json.dumps(rows).encode(), settings.cache_retrieval_ttl)
            span.set_attributes({"citerag.cache.hit": blob is not None, "citerag.mode": settings.mode,
                                 "citerag.k": settings.k, "citerag.generation": retriever.view.generation,
                                 **hit_attributes("citerag.hits", hits)})
            return hits, retriever.texts({h.document.id for h in cited(hits)})

    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult:
        from citerag.answer.citations import cite

        check_text(query, "query")
        settings = self.settings.with_changes(**(options or SearchOptions()).changes())
        timings: dict[str, float] = {}
        cache: dict[str, bool] = {}
        with sink(self._trace_sink(settings, {"question": query})), \
                tracer.start_as_current_span("citerag.search", attributes=self._operation("search", settings)) as span:
            hits, texts = self._ranked(query, settings, timings, cache, lambda ranked: ranked[:settings.k])
            hits = hits[:settings.k]
            span.set_attributes(hit_attributes("citerag.hits", hits))
            return SearchResult(hits, cite(hits, texts.__getitem__), timings, cache, current_trace_id(span))

    def ask(self, question: str, options: AskOptions | None = None) -> Answer:
        answer: Answer | None = None
        for kind, value in self.ask_events(question, options):
            if kind == "answer":
                answer = value
        assert answer is not None
        return answer

    def ask_events(self, question: str, options: AskOptions | None = None) -> Iterator[tuple[str, Any]]:
        """A question answered step by step (what a streaming client shows as it happens): ("retrieval", hits),
        then citerag.answer.pipeline.answer_events: ("citation", c)..., ("delta", text)..., ("answer", Answer).

        An answer in the answer cache (same collection generation, settings and question) is replayed as the
        same events without retrieving or generating."""
        check_text(question, "question")
        settings = self.settings.with_changes(**(options or AskOptions()).changes())
        # The gate's cut: the calibrated rule's unless a threshold was set; from here on it is settings.threshold
        # (in the answer cache's key, the trace's options and a replay's), and `refusal` says where it came from.
        rule = self.refusal_status(settings)
        if rule.rule == "calibrated":
            settings = settings.with_changes(threshold=rule.threshold)
        # The question's trace: its span is current while each event is computed (see traced_events).
        texts = {"question": question}
        span = tracer.start_span("citerag.ask", attributes=self._operation("ask", settings))
        return traced_events(span, self._ask_events(question, settings, span, texts, rule.rule),
                             self._trace_sink(settings, texts))

    def _ask_events(self, question: str, settings: Settings, span: Any, texts: dict[str, str],
                    rule: str = "threshold") -> Iterator[tuple[str, Any]]:
        from citerag.answer.pipeline import answer_events

        started = time.perf_counter()
        timings: dict[str, float] = {}
        cache: dict[str, bool] = {"query": False, "retrieval": False, "answer": False}
        with tracer.start_as_current_span("citerag.answer_cache") as cached:
            replayed = self._cached_answer(question, settings, cache)
            cached.set_attribute("citerag.cache.hit", replayed is not None)
        if replayed is not None:
            hits, answer = replayed
            answer.timings = {"total": time.perf_counter() - started}
            answer.cache = cache
            answer.trace_id = current_trace_id(span)
            texts["answer"] = answer.answer
            span.set_attributes({"citerag.cache.answer": True, "citerag.refused": answer.refused,
                                 **hit_attributes("citerag.hits", hits)})
            yield "retrieval", hits
            for citation in answer.citations:
                yield "citation", citation
            if not answer.refused:
                yield "delta", answer.answer
            yield "answer", answer
            return
        with self.store.view() as view:
            generation = view.generation
        # Only what can be cited: the hits the gate passes (answer_events applies the same rule again).
        hits, sources = self._ranked(question, settings, timings, cache,
                                     lambda ranked: gate(ranked, settings.threshold, settings.max_sources))
        span.set_attributes(hit_attributes("citerag.hits", hits))
        yield "retrieval", hits
        # The generator runs after the read has ended: a slow model holds neither the index nor the database.
        for kind, value in answer_events(question, hits, self.app.generator(settings), sources.__getitem__, settings,
                                         timings, started, rule):
            if kind == "answer":
                value.cache = cache
                value.trace_id = current_trace_id(span)
                texts["answer"] = value.answer
                span.set_attribute("citerag.refused", value.refused)
                if value.check is not None:
                    self.app.citation_metrics.record(value.check)
                self._cache_answer(question, settings, generation, hits, value)
            yield kind, value

    def _cached_answer(self, question: str, settings: Settings,
                       cache: dict[str, bool]) -> tuple[list[Hit], Answer] | None:
        if settings.cache_answer_ttl <= 0:
            return None
        with self.store.view() as view:
            key = self._key("answer", settings, view.generation, question)
            blob = self.app.cached("answer", settings.cache_url, key, settings.cache_answer_ttl)
            if blob is None:
                return None
            data = json.loads(blob)
            hits = hits_from_rows(view, data["rows"])
        cache["answer"] = True
        return hits, answer_from_dict(data["answer"])

    def _cache_answer(self, question: str, settings: Settings, generation: int, hits: list[Hit],
                      answer: Answer) -> None:
        """Kept under the generation read before retrieving: a change meanwhile makes the entry unreachable."""
        if settings.cache_answer_ttl <= 0:
            return
        data = {"rows": [[h.chunk.id, h.rank, h.score, h.cosine_distance] for h in hits],
                "answer": {**dataclasses.asdict(answer), "timings": {}, "cache": {}, "trace_id": None}}
        self.app.cache(settings.cache_url).set(self._key("answer", settings, generation, question),
                                               json.dumps(data).encode(), settings.cache_answer_ttl)

    def _operation(self, operation: str, settings: Settings) -> dict[str, Any]:
        """An operation span's attributes: what it is, where, and the options that shape its result."""
        return {OPERATION: operation, "citerag.collection": self.name,
                **{f"citerag.options.{k}": v for k, v in _trace_options(settings).items()}}

    def _trace_sink(self, settings: Settings | None, texts: dict[str, str] | None = None) -> Sink | None:
        """Where this collection's finished operations go: its trace store (None when it keeps none), with the
        query's options and, if the collection allows it (trace_text), its question and answer."""
        store = self.traces
        if store is None:
            return None
        options = _trace_options(settings) if settings is not None else {}
        kept = texts if self.settings.trace_text else None

        def write(spans: Sequence[Any]) -> None:
            store.write(spans, options, self.name, kept)

        return write

    def trace(self, trace_id: str) -> dict[str, Any] | None:
        """A kept trace of this collection (see citerag.trace.store), or None."""
        return self.traces.get(trace_id) if self.traces is not None else None

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


def _trace_options(settings: Settings) -> dict[str, Any]:
    """What a replay passes again (AskOptions' fields, as this query resolved them)."""
    return {"mode": settings.mode, "k": settings.k, "rerank_model": settings.rerank_model,
            "shortlist": settings.rerank_shortlist, "threshold": settings.threshold,
            "max_sources": settings.max_sources, "generator": settings.generator}


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


def chunk_file(path: Path, strategy: str, target: int, overlap: int, title: str | None = None,
               embedding_model: str = DEFAULT_ENCODER, percentile: float = 95.0) -> list[Chunk]:
    """How one file is cut under a strategy: what `citerag chunk` shows. `embedding_model` is loaded only for
    a strategy that embeds sentences to cut (G)."""
    from citerag.chunk import chunk_extracted
    from citerag.embed import load_encoder

    return chunk_extracted(extract_file(path, title=title or path.stem), strategy, target, overlap,
                           embed=lambda texts: load_encoder(embedding_model).encode(texts), percentile=percentile)


__all__ = ["MODES", "Accepted", "AskOptions", "Citerag", "EmptyCollection",
           "Collection", "CollectionStatus", "Discovered", "DocumentStatus", "RefusalRule", "RefusalStatus",
           "Generator", "GeneratorError", "IngestReport", "Outcome", "SearchOptions", "Settings", "Source",
           "check_text", "chunk_file", "discover", "extract_file", "gate", "load_settings", "set_in_config_file"]
