"""The indexer: files to indexed documents, with states, stamps, incremental updates and retries.

Every document ends `indexed` or `failed` with a reason; one bad file never stops the others.
Chunk counts and statuses are written here, by the indexer, when a document is done.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citerag import PIPELINE_VERSION
from citerag.chunk import chunk_extracted, strategy_params
from citerag.config import Config
from citerag.embed import Encoder
from citerag.errors import CiteragError, ExtractionError
from citerag.extract import extractor_for, supported_suffixes
from citerag.store import ChunkStats, Store
from citerag.types import Document

# Stamps that follow from others (the dimension follows from the model) are recorded but not compared,
# so staleness can be decided without loading a model.
DERIVED_STAMPS = {"embedding_dim"}


@dataclass
class IngestReport:
    indexed: list[str] = field(default_factory=list)
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    chunks: int = 0
    over_window: int = 0
    embedded_tokens: int = 0
    header_tokens: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"indexed": self.indexed, "unchanged": self.unchanged,
                "failed": [{"source_path": p, "error": e} for p, e in self.failed],
                "removed": self.removed, "chunks": self.chunks, "chunks_over_window": self.over_window,
                "embedded_tokens": self.embedded_tokens, "header_tokens": self.header_tokens}


def discover(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """(files to index, folders given). Files named explicitly are taken whatever their suffix."""
    files: list[Path] = []
    roots: list[Path] = []
    suffixes = set(supported_suffixes())
    for given in paths:
        if not given.exists():
            raise CiteragError(f"no such file or directory: {given}")
        path = given.resolve()
        if path.is_dir():
            roots.append(path)
            found = [p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix.lower() in suffixes
                     and not any(part.startswith(".") for part in p.relative_to(path).parts)]
            if not found:
                raise CiteragError(f"no documents under {given} (supported: {' '.join(sorted(suffixes))})")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise CiteragError(f"not a regular file or directory: {given}")
    return list(dict.fromkeys(files)), roots


def is_stale(doc: Document, current: dict[str, Any]) -> bool:
    def comparable(stamps: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in stamps.items() if k not in DERIVED_STAMPS}

    return comparable(doc.stamps) != comparable(current)


class Indexer:
    def __init__(self, store: Store, config: Config, encoder: Callable[[], Encoder]) -> None:
        self.store = store
        self.config = config
        self._encoder_factory = encoder
        self._encoder: Encoder | None = None

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = self._encoder_factory()
        return self._encoder

    def stamps_for(self, path: Path) -> dict[str, Any]:
        extractor = extractor_for(path)
        cfg = self.config
        return {
            "extractor": extractor.name if extractor else "none",
            "extractor_version": extractor.version if extractor else "0",
            "pipeline_version": PIPELINE_VERSION,
            "strategy": cfg.strategy,
            "strategy_params": strategy_params(cfg.strategy, cfg.target, cfg.overlap),
            "embedding_model": cfg.embedding_model,
        }

    def stale(self, doc: Document) -> bool:
        return is_stale(doc, self.stamps_for(Path(doc.source_path)))

    def ingest(self, paths: Iterable[Path], progress: Callable[[Iterable[Path]], Iterable[Path]] | None = None
               ) -> IngestReport:
        files, roots = discover(paths)
        report = IngestReport()
        todo = []
        for path in files:
            doc = self.store.document_by_path(str(path))
            if doc and doc.status != "pending" and not self.stale(doc) and doc.sha256 == _sha256_or_none(path):
                report.unchanged += 1
            else:
                todo.append(path)
        for path in progress(todo) if progress else todo:
            self._index(path, report)
        present = set(files)
        for doc in self.store.documents():
            source = Path(doc.source_path)
            if source not in present and any(source.is_relative_to(r) for r in roots) and not source.exists():
                self.store.delete(doc.id)
                report.removed.append(doc.source_path)
        return report

    def retry_failed(self, progress: Callable[[Iterable[Path]], Iterable[Path]] | None = None) -> IngestReport:
        return self._reindex([d for d in self.store.documents() if d.status != "indexed"], progress)

    def reindex_stale(self, progress: Callable[[Iterable[Path]], Iterable[Path]] | None = None) -> IngestReport:
        return self._reindex([d for d in self.store.documents() if self.stale(d)], progress)

    def _reindex(self, docs: list[Document], progress: Callable[[Iterable[Path]], Iterable[Path]] | None
                 ) -> IngestReport:
        report = IngestReport()
        paths = [Path(d.source_path) for d in docs]
        for path in progress(paths) if progress else paths:
            self._index(path, report)
        return report

    def _index(self, path: Path, report: IngestReport) -> None:
        doc = self.store.document_by_path(str(path))
        stamps = self.stamps_for(path)
        sha = ""
        doc_id = doc.id if doc else None
        try:
            data = self._read(path)
            sha = hashlib.sha256(data).hexdigest()
            if doc_id is None:
                doc_id = self.store.add_pending(str(path), path.name, sha)
            self._index_bytes(doc_id, path, data, sha, stamps, report)
            report.indexed.append(str(path))
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # one bad file must never stop the others: store why, go on
            reason = str(exc) if isinstance(exc, CiteragError) else f"{type(exc).__name__}: {exc}"
            if doc_id is None:
                doc_id = self.store.add_pending(str(path), path.name, sha)
            self.store.save_failed(doc_id, sha256=sha, stamps=stamps, error=reason)
            report.failed.append((str(path), reason))

    def _read(self, path: Path) -> bytes:
        limit = int(self.config.max_file_mb * 1024 * 1024)
        try:
            size = path.stat().st_size
            if size > limit:
                raise ExtractionError(f"file is {size / 1048576:.1f} MB, over the {self.config.max_file_mb:g} MB "
                                      "limit (max_file_mb)")
            return path.read_bytes()
        except FileNotFoundError:
            raise ExtractionError("file no longer exists") from None
        except OSError as exc:
            raise ExtractionError(f"cannot read file: {exc.strerror}") from exc

    def _index_bytes(self, doc_id: int, path: Path, data: bytes, sha: str, stamps: dict[str, Any],
                     report: IngestReport) -> None:
        extractor = extractor_for(path)
        if extractor is None:
            raise ExtractionError(f"unsupported format {path.suffix or '(no suffix)'} "
                                  f"(supported: {' '.join(supported_suffixes())})")
        extracted = extractor.extract(data, path)
        cfg = self.config
        chunks = chunk_extracted(extracted, cfg.strategy, cfg.target, cfg.overlap)
        if not chunks:
            raise ExtractionError("no text to index after extraction")
        encoder = self.encoder
        tokens = encoder.count_tokens([c.text for c in chunks])
        headers = sorted({c.header for c in chunks if c.header})
        # Word pieces spent on the header, less the [CLS]/[SEP] the tokenizer adds to any text.
        header_counts = {h: n - 2 for h, n in zip(headers, encoder.count_tokens(headers), strict=True)}
        stats = ChunkStats(tokens=tokens, header_tokens=[header_counts.get(c.header, 0) for c in chunks])
        vectors = encoder.encode([c.text for c in chunks])
        stamps = {**stamps, "embedding_dim": encoder.dim}
        self.store.save_indexed(doc_id, title=extracted.title, sha256=sha, stamps=stamps,
                                canonical_text=extracted.text, warnings=extracted.warnings, chunks=chunks,
                                vectors=vectors, stats=stats, locators=extracted.locators)
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


__all__ = ["IngestReport", "Indexer", "discover", "is_stale"]
