"""The indexer: sources to indexed documents, with states, stamps, incremental updates and retries.

Every document ends `indexed` or `failed` with a reason; one bad file never stops the others. A document
that was indexed keeps its old version searchable until a new one is committed: if re-indexing it fails,
the reason is recorded next to the old version instead of replacing it. Errors of the store itself (a full
disk, an I/O error) are no document's fault: they stop the run, and `retry` picks up what was left.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any

from citerag import PIPELINE_VERSION, lang
from citerag.chunk import chunk_extracted, strategy_params
from citerag.embed import Encoder
from citerag.errors import CiteragError, ExtractionError, StoreUnavailable, Superseded
from citerag.ingest.files import Discovered, IngestReport, Outcome, Source, display_path
from citerag.settings import Settings
from citerag.store import ChunkStats, Store
from citerag.trace import OPERATION, tracer
from citerag.types import SOURCE_SCHEME, UPLOAD_SCHEME, Document

# Stamps that follow from others (the dimension follows from the model) or from the bytes (the language
# detected in the text) are recorded but not compared, so staleness is decided without loading a model.
DERIVED_STAMPS = {"embedding_dim", "language"}

Progress = Callable[[Iterable[Any]], Iterable[Any]]
UploadReader = Callable[[Document], "bytes | None"]  # an uploaded document's stored original (citerag.originals)
log = logging.getLogger("citerag.ingest")


def stamps_differ(doc: Document, current: dict[str, Any]) -> bool:
    def comparable(stamps: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in stamps.items() if k not in DERIVED_STAMPS}

    return comparable(doc.stamps) != comparable(current)


def is_stale(doc: Document, current: dict[str, Any]) -> bool:
    """Only an indexed document can be stale: pending and failed ones are `retry`'s business."""
    return doc.status == "indexed" and stamps_differ(doc, current)


def is_settled(doc: Document, sha256: str | None, current: dict[str, Any]) -> bool:
    """Nothing to do for these bytes: indexed (with no newer version waiting) or failed, under the same stamps."""
    done = doc.status == "failed" or (doc.status == "indexed" and not doc.error)
    return done and doc.sha256 == sha256 and not stamps_differ(doc, current)


class Indexer:
    def __init__(self, store: Store, settings: Settings, encoder: Callable[[], Encoder]) -> None:
        self.store = store
        self.settings = settings
        self._encoder = encoder  # called only when something is embedded: status and retry of nothing load no model

    def stamps_for(self, name: str) -> dict[str, Any]:
        # Imported where used: the extractors import lxml, pdf and office readers, which `citerag ask` never needs.
        from citerag.extract import extractor_for

        extractor = extractor_for(Path(name))
        s = self.settings
        return {
            "extractor": extractor.name if extractor else "none",
            "extractor_version": extractor.version if extractor else "0",
            "pipeline_version": PIPELINE_VERSION,
            "strategy": s.strategy,
            "strategy_params": strategy_params(s.strategy, s.target, s.overlap, s.semantic_percentile),
            "embedding_model": s.embedding_model,
        }

    def stale(self, doc: Document) -> bool:
        return is_stale(doc, self.stamps_for(doc.name))

    def ingest(self, found: Discovered, progress: Progress | None = None) -> IngestReport:
        report = IngestReport()
        todo: list[Path] = []
        for path in found.files:
            key = display_path(path)
            doc = self.store.document_by_path(key)
            if doc and key == str(path) and is_settled(doc, _sha256_or_none(path), self.stamps_for(doc.name)):
                report.unchanged += 1
            else:
                todo.append(path)
        for path in progress(todo) if progress else todo:
            self._index_file(path, report)
        present = {display_path(p) for p in found.files}
        for doc in self.store.documents():
            source = Path(doc.source_path)
            if doc.source_path not in present and any(source.is_relative_to(r) for r in found.roots) \
                    and not source.exists():
                self.store.delete(doc.id)
                report.removed.append(doc.source_path)
        return report

    def retry_failed(self, progress: Progress | None = None, uploads: UploadReader | None = None) -> IngestReport:
        return self._reindex([d for d in self.store.documents() if d.status != "indexed" or d.error], progress,
                             uploads)

    def reindex_stale(self, progress: Progress | None = None, uploads: UploadReader | None = None) -> IngestReport:
        return self._reindex([d for d in self.store.documents() if self.stale(d)], progress, uploads)

    def _reindex(self, docs: list[Document], progress: Progress | None,
                 uploads: UploadReader | None) -> IngestReport:
        report = IngestReport()
        for doc in progress(docs) if progress else docs:
            if doc.source_path.startswith((UPLOAD_SCHEME, SOURCE_SCHEME)):
                self._index_upload(doc, report, uploads)
            else:
                self._index_file(Path(doc.source_path), report)
        return report

    def _index_upload(self, doc: Document, report: IngestReport, uploads: UploadReader | None) -> None:
        """An uploaded document has no path: its bytes are the stored original of the version it names."""
        if doc.status == "indexed" and doc.error:
            # Only the queue's job knows the failed newer version's bytes; rebuilding the served one from here
            # would erase the reason and never retry the newer one.
            report.failed.append((doc.source_path, f"a newer uploaded version failed ({doc.error}): retry it "
                                                   f"through the service (POST .../documents/{doc.id}/retry)"))
            return
        data = uploads(doc) if uploads is not None and doc.sha256 else None
        if data is None:
            current = self.store.document(doc.id)
            if current is None or current.sha256 != doc.sha256:
                # Replaced (its old bytes then forgotten) or deleted since the list was read: the newer state stands.
                report.unchanged += 1
                return
            self._fail(doc.source_path, doc.name, doc.sha256 or "", "the uploaded original is no longer stored: "
                       "upload the file again", report, doc_id=doc.id)
            return
        # Saved only if the document still has this version when the rebuild commits: a service's job may commit
        # a newer upload meanwhile, and an older version must never overwrite it.
        self.index_document(Source(doc.source_path, data, doc.name, replaces=doc.sha256), report)

    def _index_file(self, path: Path, report: IngestReport) -> None:
        key = display_path(path)
        try:
            if key != str(path):  # sqlite (and every API client) needs text: such a name cannot be stored as is
                raise ExtractionError("the file name is not valid UTF-8: rename the file")
            data = self._read(path)
        except ExtractionError as exc:
            self._fail(key, path.name if key == str(path) else PurePosixPath(key).name, "", str(exc), report)
            return
        self.index_document(Source(key, data), report)

    def index_document(self, source: Source, report: IngestReport | None = None) -> Outcome:
        """Index one document from its bytes: what an upload endpoint or a queue worker calls.

        Unchanged bytes under unchanged stamps are left as they are. Any failure of the document itself is
        stored as its reason and returned; a store failure (StoreUnavailable) is raised."""
        with tracer.start_as_current_span("citerag.index_document", attributes={
                OPERATION: "index", "citerag.collection": self.settings.collection,
                "citerag.document.bytes": len(source.data)}) as span:
            outcome = self._traced_index(source, report)
            span.set_attributes({"citerag.document.id": outcome.document_id, "citerag.document.status": outcome.status})
            return outcome

    def _traced_index(self, source: Source, report: IngestReport | None) -> Outcome:
        report = report if report is not None else IngestReport()
        sha = hashlib.sha256(source.data).hexdigest()
        doc = self.store.document_by_path(source.uri)
        stamps = self.stamps_for(source.display_name)
        if doc and doc.status == "indexed" and is_settled(doc, sha, stamps):
            report.unchanged += 1
            return Outcome(doc.id, "unchanged")
        doc_id = doc.id if doc else self.store.add_pending(source.uri, source.display_name, sha)
        try:
            self._check_size(len(source.data))
            self._index_bytes(doc_id, source, sha, stamps, report)
        except (KeyboardInterrupt, SystemExit, StoreUnavailable):
            raise
        except Superseded:  # a newer version was committed while this one was rebuilt: it stays
            report.unchanged += 1
            return Outcome(doc_id, "unchanged")
        except Exception as exc:  # one bad document must never stop the others: store why, go on
            reason = str(exc) if isinstance(exc, CiteragError) else f"{type(exc).__name__}: {exc}"
            return self._fail(source.uri, source.display_name, sha, reason, report, doc_id=doc_id, stamps=stamps)
        report.indexed.append(source.uri)
        return Outcome(doc_id, "indexed")

    def _fail(self, key: str, name: str, sha: str, reason: str, report: IngestReport, *, doc_id: int | None = None,
              stamps: dict[str, Any] | None = None) -> Outcome:
        doc = self.store.document(doc_id) if doc_id is not None else self.store.document_by_path(key)
        if doc is None and doc_id is not None:  # deleted while it was being indexed: it stays deleted
            report.failed.append((key, reason))
            return Outcome(doc_id, "failed", reason)
        doc_id = self.store.add_pending(key, name, sha) if doc is None else doc.id
        if doc is not None and doc.status == "indexed":
            # The old version stays searchable; the reason says why the newer one could not replace it.
            self.store.set_error(doc_id, reason)
        else:
            self.store.save_failed(doc_id, sha256=sha, stamps=stamps or self.stamps_for(name), error=reason)
        report.failed.append((key, reason))
        return Outcome(doc_id, "failed", reason)

    def fail_document(self, doc_id: int, name: str, sha: str, reason: str) -> Outcome:
        """Record that indexing a document failed outside `index_document` (its worker died, the store was down):
        `failed` with the reason, or, for an indexed one, the reason beside the version it keeps serving."""
        doc = self.store.document(doc_id)
        return self._fail(doc.source_path if doc else "", name, sha, reason, IngestReport(), doc_id=doc_id)

    def _check_size(self, size: int) -> None:
        if size > self.settings.max_file_mb * 1024 * 1024:
            raise ExtractionError(f"file is {size / 1048576:.1f} MB, over the {self.settings.max_file_mb:g} MB "
                                  "limit (max_file_mb)")

    def _read(self, path: Path) -> bytes:
        try:
            self._check_size(path.stat().st_size)  # before reading: an oversized file is never loaded
            return path.read_bytes()
        except FileNotFoundError:
            raise ExtractionError("file no longer exists") from None
        except OSError as exc:
            raise ExtractionError(f"cannot read file: {exc.strerror}") from exc

    def _index_bytes(self, doc_id: int, source: Source, sha: str, stamps: dict[str, Any],
                     report: IngestReport) -> None:
        from citerag.extract import extractor_for, supported_suffixes

        name = Path(source.display_name)
        extractor = extractor_for(name)
        if extractor is None:
            raise ExtractionError(f"unsupported format {name.suffix or '(no suffix)'} "
                                  f"(supported: {' '.join(supported_suffixes())})")
        with tracer.start_as_current_span("citerag.extract") as span:
            extracted = extractor.extract(source.data, name)
            language = lang.detect(extracted.text)
            span.set_attributes({"citerag.extractor": extractor.name, "citerag.extract.chars": len(extracted.text),
                                 "citerag.extract.sections": len(extracted.sections),
                                 "citerag.extract.warnings": len(extracted.warnings),
                                 "citerag.language": language})
        s = self.settings
        with tracer.start_as_current_span("citerag.chunk") as span:
            # Strategy G embeds sentences to place its cuts; the encoder is loaded only if it does.
            chunks = chunk_extracted(extracted, s.strategy, s.target, s.overlap,
                                     embed=lambda texts: self._encoder().encode(texts),
                                     percentile=s.semantic_percentile, language=language)
            span.set_attributes({"citerag.strategy": s.strategy, "citerag.chunks.count": len(chunks),
                                 "citerag.chunks.starts": [c.start for c in chunks],
                                 "citerag.chunks.ends": [c.end for c in chunks]})
        if not chunks:
            raise ExtractionError("no text to index after extraction")
        with tracer.start_as_current_span("citerag.embed") as span:
            encoder = self._encoder()
            tokens = encoder.count_tokens([c.text for c in chunks])
            headers = sorted({c.header for c in chunks if c.header})
            # Word pieces spent on the header, less the [CLS]/[SEP] the tokenizer adds to any text.
            header_counts = {h: n - 2 for h, n in zip(headers, encoder.count_tokens(headers), strict=True)}
            stats = ChunkStats(tokens=tokens, header_tokens=[header_counts.get(c.header, 0) for c in chunks])
            vectors = encoder.encode([c.text for c in chunks])
            span.set_attributes({"citerag.embedding_model": s.embedding_model, "citerag.embed.count": len(chunks),
                                 "citerag.embed.tokens": tokens,
                                 "citerag.embed.over_window": sum(t > encoder.max_tokens for t in tokens)})
        stamps = {**stamps, "embedding_dim": encoder.dim, "language": language}
        # One transaction replaces the old version: readers see it whole before or whole after.
        with tracer.start_as_current_span("citerag.store") as span:
            self.store.save_indexed(doc_id, title=extracted.title, sha256=sha, stamps=stamps,
                                    canonical_text=extracted.text, warnings=extracted.warnings, chunks=chunks,
                                    vectors=vectors, stats=stats, locators=extracted.locators,
                                    replaces=source.replaces)
            span.set_attributes({"citerag.document.id": doc_id, "citerag.chunks.count": len(chunks)})
        report.chunks += len(chunks)
        report.over_window += sum(t > encoder.max_tokens for t in tokens)
        report.embedded_tokens += sum(tokens)
        report.header_tokens += sum(stats.header_tokens)


def _sha256_or_none(path: Path) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


