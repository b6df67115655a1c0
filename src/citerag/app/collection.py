"""One collection: its settings, its store and search state, and what runs on them: writes (ingest, uploads,
deletes, retries, reindexing), the refusal rule's calibration, and reads (documents, status, the question path
of citerag.app.query)."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from citerag.app import links
from citerag.app.models import (
    Accepted,
    AskOptions,
    CollectionStatus,
    DocumentStatus,
    EmptyCollection,
    Followup,
    RefusalStatus,
    RetrieverStatus,
    SearchOptions,
)
from citerag.app.query import Query, trace_options
from citerag.app.shared import Shared
from citerag.app.signals import best_signals
from citerag.app.unserved import Unserved
from citerag.backends import open_backend
from citerag.embed.fused import foreign_share
from citerag.errors import CiteragError
from citerag.ingest.files import Discovered, IngestReport, Outcome, Source, discover
from citerag.ingest.indexer import Indexer, Progress, is_stale
from citerag.originals import read_original, save_original
from citerag.refusal import RefusalRule
from citerag.settings import Settings
from citerag.store import ChunkStats, Store
from citerag.trace import sink
from citerag.trace.setup import Sink
from citerag.types import Answer, Document, SearchResult, StoredChunk, readable_by

log = logging.getLogger("citerag")


class Collection:
    """One collection: its settings, its store, and the search state over the store's current generation."""

    def __init__(self, app: Shared, settings: Settings, store: Store) -> None:
        self.app = app
        self.settings = settings
        self.name = settings.collection
        self.store = store
        self.indexer = Indexer(store, settings, lambda: app.encoder(settings.embedding_model))
        self.write_lock = threading.Lock()  # a server's writers to this collection take turns (indexing, deleting)
        self._accept_lock = threading.Lock()
        backend = open_backend(settings)
        self.search_backend = backend.search(settings)
        self.originals = backend.originals(settings, store)  # uploaded bytes, by SHA-256
        self.unserved = Unserved()  # replacements this process submitted that no row names yet (app/uploads.py)
        # Defaults this collection does not follow because its documents were indexed otherwise (app/stamps.py).
        self.newer_defaults: dict[str, Any] = {}
        self.identity: object | None = None  # the catalog's identity of it when opened (see Citerag.refresh)
        # What the last automatic calibration did (the CLI reports it): the rule fitted, or why none was.
        self.last_calibration: RefusalRule | CiteragError | None = None
        # Traces beside a sqlite store, or in a PostgreSQL store's database through its pool (None: trace_keep 0).
        self.traces = backend.traces(settings, store)

    @property
    def location(self) -> str:
        """Where the documents live, as a person reads it (the index folder; a URL never shows its password)."""
        return str(self.settings.sqlite_dir) if self.settings.store_scheme == "sqlite" else self.settings.safe_url

    def close(self) -> None:
        try:
            if self.traces is not None:  # its queued traces written first: a PostgreSQL one borrows the store's pool
                self.traces.close()
            # An HNSW graph still being built in the background is waited for and saved, with the store still open.
            self.search_backend.close(self.store)
        finally:
            self.store.close()

    # Writing
    # Each write ends by saving the search indexes (see persist_indexes), also when the write failed half way.
    def ingest(self, paths: Iterable[Path] | Discovered, progress: Progress | None = None) -> IngestReport:
        found = paths if isinstance(paths, Discovered) else discover(paths)
        try:
            with sink(self.trace_sink(None)):
                report = self.indexer.ingest(found, progress)
        finally:
            self.persist_indexes()
        if report.indexed or report.removed:  # a run that changed documents recalibrates the refusal rule
            self.recalibrate(always=True)
        return report

    def index_document(self, source: Source, refit: bool = True) -> Outcome:
        try:
            with sink(self.trace_sink(None)):
                outcome = self.indexer.index_document(source)
        finally:
            self.persist_indexes()
        # An upload refits only when upload_needs_refit says (a fit embeds ~400 questions); a batch (a source's
        # sync) passes refit=False and fits once after it, as ingest does.
        if refit:
            self.recalibrate(always=False)
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
        rule = fit_rule(chunks, len(documents), self.settings.embedding_model,
                        lambda queries: best_signals(self, queries))
        self.store.save_refusal_rule(rule.encoder, rule.to_json())
        self.last_calibration = rule
        return rule

    def recalibrate(self, always: bool) -> None:
        """After a write: fit the rule again (always, or when citerag.refusal.calibrate.upload_needs_refit says). A
        collection too small to calibrate, or a failure, keeps the rule it had; the write itself stands."""
        from citerag.refusal.calibrate import TooSmall, upload_needs_refit

        try:
            statuses = [] if always else [d.status for d in self.store.documents()]
            if not always and not upload_needs_refit(self.refusal_rule(), statuses, self.settings.embedding_model):
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
            with sink(self.trace_sink(None)):
                return self.indexer.retry_failed(progress, self.read_original)
        finally:
            self.persist_indexes()

    def reindex_stale(self, progress: Progress | None = None) -> IngestReport:
        try:
            with sink(self.trace_sink(None)):
                return self.indexer.reindex_stale(progress, self.read_original)
        finally:
            self.persist_indexes()

    # Uploaded originals (citerag.originals): what a citation opens and a queue worker indexes.
    def save_original(self, data: bytes) -> str:
        """Keep an upload's bytes before its document exists (so its job always finds them); their SHA-256."""
        return save_original(self.originals, data)

    def read_original(self, doc: Document, sha256: str | None = None) -> bytes | None:
        """The bytes with hash `sha256` (default: the indexed version's), or None when they are gone."""
        return read_original(self.originals, doc, sha256)

    def forget_original(self, sha256: str) -> None:
        """Remove stored bytes no document of the collection refers to any more, nor a job waits for."""
        if not self.unserved.holds(sha256):
            self.originals.remove_unreferenced(sha256)

    def fail_document(self, document_id: int, sha256: str, name: str, reason: str) -> Outcome:
        """Failed outside index_document (a crashed worker, an outage): `failed`, or an indexed one's reason."""
        outcome = self.indexer.fail_document(document_id, name, sha256, reason)
        self.persist_indexes()
        return outcome

    def accept(self, source: Source) -> Accepted:
        """Take in an upload without indexing it yet: the document that already holds these bytes, or a new
        `pending` one (index it with index_document); a different file under the same key is the caller's."""
        sha = hashlib.sha256(source.data).hexdigest()
        with self._accept_lock:  # two uploads of one new name at once: the second finds the first's document
            doc = self.store.document_by_path(source.uri)
            if doc is not None:
                return Accepted(doc, doc.sha256 == sha)
            doc_id = self.store.add_pending(source.uri, source.display_name, sha)
        new = self.store.document(doc_id)
        assert new is not None
        return Accepted(new, False)

    def documents(self) -> list[Document]:
        return list(self.store.documents())

    def document(self, document_id: int) -> Document | None:
        return self.store.document(document_id)

    def is_stale(self, doc: Document) -> bool:
        """Indexed under stamps that differ from this collection's settings (`reindex --stale` rebuilds it)."""
        return self.indexer.stale(doc)

    def canonical_text(self, document_id: int) -> str:  # route and tools check who may read it (app/access.py)
        return self.store.canonical_text(document_id)

    def status(self, audience: frozenset[str] | None = None) -> CollectionStatus:
        """Its documents, those a caller who may read `audience`'s (None: all), and how it answers."""
        rows = [DocumentStatus(d, is_stale(d, self.indexer.stamps_for(d.name))) for d in self.store.documents()
                if readable_by(d.groups, audience)]
        newer = {name: (getattr(self.settings, name), default) for name, default in self.newer_defaults.items()}
        return CollectionStatus(self.name, self.location, rows, self.refusal_status(self.settings), newer,
                                self.retriever_status(self.settings))

    def retriever_status(self, settings: Settings) -> RetrieverStatus:  # status, the API's collection view
        return RetrieverStatus(settings.mode, settings.lexical_weight, foreign_share(settings.embedding_model),
                               settings.embedding_model)

    def refusal_status(self, settings: Settings) -> RefusalStatus:
        """The rule that refuses questions under these settings (the collection's, or a request's)."""
        rule = self.refusal_rule()
        lexical = settings.lexical_threshold or None
        if settings.refusal == "threshold":
            return RefusalStatus("threshold", settings.threshold, "refusal = \"threshold\"", rule, lexical)
        if "threshold" in settings.model_fields_set:
            return RefusalStatus("threshold", settings.threshold, "a threshold was set explicitly", rule, lexical)
        if rule is None:
            return RefusalStatus("threshold", settings.threshold,
                                 f"no calibration for {settings.embedding_model} yet (`citerag calibrate`)", None,
                                 lexical)
        return RefusalStatus("calibrated", rule.threshold, "calibrated for this collection", rule,
                             rule.lexical_threshold)

    def chunk_stats(self) -> dict[int, ChunkStats]:
        return dict(self.store.chunk_stats())

    def indexed_chunks(self) -> tuple[list[StoredChunk], dict[int, Document]]:
        """Every searchable chunk and its document, from one consistent snapshot (evaluation, training)."""
        snapshot = self.store.snapshot(self.settings.embedding_model)
        return list(snapshot.chunks), dict(snapshot.documents)

    def persist_indexes(self) -> None:
        """After every write: the search indexes made durable for the next process (saved beside a sqlite store;
        a server store wrote them in the write's own transaction). Never raises: nothing is lost."""
        self.search_backend.persist(self.store)

    # Reading through the question path (citerag.app.query)
    def search(self, query: str, options: SearchOptions | None = None) -> SearchResult:
        return links.result(self.store, Query.search(self, query, options))

    def ask(self, question: str, options: AskOptions | None = None, followup: Followup | None = None) -> Answer:
        answer: Answer | None = None
        for kind, value in self.ask_events(question, options, followup):
            if kind == "answer":
                answer = value
        assert answer is not None
        return answer

    def ask_events(self, question: str, options: AskOptions | None = None,
                   followup: Followup | None = None) -> Iterator[tuple[str, Any]]:
        """See citerag.app.query.Query.ask_events; a source's document cited with where it lives (app/links.py)."""
        return links.events(self.store, Query.ask_events(self, question, options, followup))

    def trace_sink(self, settings: Settings | None, texts: dict[str, str] | None = None,
                   filters: dict[str, Any] | None = None) -> Sink | None:
        """Where finished operations go (None: nowhere), with the query's options and filters and, where the
        collection keeps texts (trace_text), its question and answer."""
        if (store := self.traces) is None:
            return None
        options = (trace_options(settings) if settings is not None else {}) | ({"filters": filters} if filters else {})
        kept = texts if self.settings.trace_text else None

        def write(spans: Sequence[Any]) -> None:  # queued for the store's writer thread: never on the request path
            store.submit(spans, options, self.name, kept)

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
