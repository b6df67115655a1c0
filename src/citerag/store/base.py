"""The store contract: documents, chunks and vectors, one transaction per document."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from citerag.types import (
    Chunk,
    ConversationInfo,
    Document,
    Experiment,
    Facets,
    Label,
    Locator,
    SourceInfo,
    SourceItem,
    StoredChunk,
    Turn,
)


@dataclass
class ChunkStats:
    """Per-document embedding figures, stored so that `status` and the evaluation can report them."""

    tokens: list[int] = field(default_factory=list)
    header_tokens: list[int] = field(default_factory=list)


@dataclass
class Snapshot:
    """Everything search needs, read in one transaction: chunks in a fixed order and their vectors, row for row.

    `texts` holds the canonical text of every document in `documents`, from the same read, so that
    `texts[c.document_id][c.start:c.end] == c.content` for every chunk even while an indexer commits.
    """

    chunks: list[StoredChunk]
    documents: dict[int, Document]
    vectors: np.ndarray
    excluded_documents: int = 0  # indexed with another embedding model: never mixed in
    texts: dict[int, str] = field(default_factory=dict)
    generation: int = 0  # the store generation read; a later `Store.generation()` differing means stale


@dataclass
class ChunkBatch:
    """Chunks for a search index, row for row: stored chunk ids, their documents, embedded texts, unit vectors."""

    ids: np.ndarray  # int64
    document_ids: np.ndarray  # int64
    texts: list[str]
    vectors: np.ndarray  # float32, (len(ids), dim)

    def __len__(self) -> int:
        return len(self.ids)


def checked_vectors(chunks: Sequence[Chunk], vectors: np.ndarray) -> np.ndarray:
    """The vectors of a version to save, as contiguous float32: one per chunk and unit length (every backend
    refuses anything else before it writes: cosine distance is ||a-b||^2/2 only then)."""
    if len(chunks) != len(vectors):
        raise ValueError("one vector per chunk")
    vecs = np.ascontiguousarray(vectors, dtype=np.float32)
    if len(vecs) and not np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3):
        raise ValueError("vectors must be unit length: cosine distance is ||a-b||^2/2 only then")
    return vecs


class StoreView(Protocol):
    """One read transaction: every call sees the same commit, `generation`, whatever commits meanwhile."""

    generation: int

    def changed_documents(self, since: int) -> list[int] | None:
        """Documents changed by generations after `since`; None when the change log does not reach back that far."""
        ...

    def indexed_chunks(self, embedding_model: str, document_ids: Sequence[int] | None = None,
                       batch: int = 20_000) -> Iterator[ChunkBatch]:
        """The chunks of indexed documents of this model (all, or of `document_ids`), by chunk id, in batches."""
        ...

    def chunks(self, ids: Iterable[int]) -> dict[int, StoredChunk]:
        """Stored chunks by id; ids no longer stored are left out."""
        ...

    def documents(self, ids: Iterable[int]) -> dict[int, Document]:
        """Documents by id, locators loaded."""
        ...

    def facets(self) -> list[Facets]:
        """Every indexed document's facets, by id (what a search's filters are resolved against)."""
        ...

    def texts(self, ids: Iterable[int]) -> dict[int, str]:
        """Canonical texts of indexed documents by id."""
        ...

    def excluded_documents(self, embedding_model: str) -> int:
        """Indexed documents stamped with another embedding model: never searched alongside this one."""
        ...


class Store(Protocol):
    """Documents, chunks and vectors. Every change is one transaction and bumps `generation()`.

    `Document.error` is why a document failed (status 'failed'), or, for an 'indexed' one, why its newest
    version could not replace the one still served (`set_error`). Environment failures (disk full, I/O,
    read-only, locked) raise `citerag.errors.StoreUnavailable`, never a document's error.
    """

    def documents(self) -> list[Document]:
        """Every document, ordered by source path (locators not loaded)."""
        ...

    def document(self, doc_id: int) -> Document | None: ...

    def document_by_path(self, source_path: str) -> Document | None: ...

    def add_pending(self, source_path: str, name: str, sha256: str) -> int: ...

    def save_indexed(self, doc_id: int, *, title: str, sha256: str, stamps: dict[str, Any],
                     canonical_text: str, warnings: list[str], chunks: list[Chunk], vectors: np.ndarray,
                     stats: ChunkStats, locators: list[Locator] | None = None, replaces: str | None = None) -> None:
        """Replace the document's version whole (chunks, vectors, text, locators) and clear its error. With
        `replaces` (a SHA-256), only while the document still has that version, checked in the same transaction:
        else `Superseded` and nothing changes (a rebuild of an older version never overwrites a newer one)."""
        ...

    def save_failed(self, doc_id: int, *, sha256: str, stamps: dict[str, Any], error: str) -> None:
        """Mark the document failed with a reason and drop whatever version it had."""
        ...

    def set_error(self, doc_id: int, error: str | None) -> None:
        """Record (or clear) a reason on the document and change nothing else: the indexed version stays served."""
        ...

    def set_tags(self, doc_id: int, tags: list[str]) -> bool:
        """Replace the document's tags (a new generation: cached filtered results are not found again); False when
        there is no such document. A new version of the document keeps them."""
        ...

    def set_groups(self, doc_id: int, groups: list[str]) -> bool:
        """Replace the groups that may read the document ([]: everyone who may read the collection), in one
        transaction that starts a new generation: no cached result computed before it is found after it. False
        when there is no such document. A new version of the document keeps them."""
        ...

    def delete(self, doc_id: int) -> None: ...

    def canonical_text(self, doc_id: int) -> str: ...

    def locators(self, doc_id: int) -> list[Locator]:
        """The extractor's locator map for the document (empty for plain text formats)."""
        ...

    def chunk_stats(self) -> dict[int, ChunkStats]: ...

    def generation(self) -> int:
        """A counter bumped in the same transaction as every change to documents or chunks; reads leave it."""
        ...

    def view(self) -> AbstractContextManager[StoreView]:
        """A read transaction for search: what the search indexes catch up to and where hits are read from."""
        ...

    def snapshot(self, embedding_model: str) -> Snapshot:
        """Indexed documents of this embedding model, their chunks, vectors and texts, as of one commit."""
        ...

    def refusal_rule(self, encoder: str) -> str | None:
        """The collection's calibrated refusal rule for this encoder (JSON, citerag.refusal.RefusalRule), or None."""
        ...

    def save_refusal_rule(self, encoder: str, rule: str) -> None:
        """Keep `rule` (JSON) as the collection's rule for this encoder, replacing any earlier one. Leaves the
        generation alone: answer caches key on the rule's cut, not on the generation."""
        ...

    def add_turn(self, conversation_id: str, owner: str, turn: Turn) -> Turn:
        """Append `turn` (its number and time set here) to the conversation, created if new. In one transaction:
        a conversation of another owner, or of another collection, raises conversations.NotYours."""
        ...

    def conversations(self, owner: str, limit: int = 100) -> list[ConversationInfo]:
        """The owner's conversations in this collection, the most recently continued first."""
        ...

    def conversation(self, conversation_id: str) -> tuple[ConversationInfo, list[Turn]] | None: ...

    def delete_conversation(self, conversation_id: str) -> bool:
        """Remove it and its turns; False when there was none."""
        ...

    def add_label(self, label: Label) -> Label:
        """Keep a production question's label (its time set here), replacing the trace's earlier one."""
        ...

    def labels(self) -> list[Label]:
        """Every label of the collection, in the order their questions were asked."""
        ...

    def start_experiment(self, experiment: Experiment) -> Experiment:
        """Start it (its time set here); CiteragError while another runs or when its name was used before."""
        ...

    def stop_experiment(self) -> Experiment | None:
        """Stop the running experiment (None when none runs); it stays listed."""
        ...

    def experiments(self) -> list[Experiment]:
        """Every experiment of the collection, the newest (the running one, if any) first."""
        ...

    def sources(self) -> list[SourceInfo]:
        """The collection's sources (citerag.store.sources), by name."""
        ...

    def put_source(self, info: SourceInfo, create: bool = False) -> SourceInfo:
        """Add a source (`create`; CiteragError when the name is taken) or replace its configuration and status
        (CiteragError when there is none)."""
        ...

    def remove_source(self, name: str) -> bool:
        """Remove the source and its records (not its documents: the caller removes those first)."""
        ...

    def lease_source(self, name: str, holder: str, seconds: float, take_from: str | None = None) -> str | None:
        """Hold the source's sync lease for `seconds` (None), or who holds it; 0 seconds lets `holder`'s go."""
        ...

    def source_items(self, name: str) -> list[SourceItem]: ...

    def source_records(self, document_ids: Iterable[int]) -> dict[int, SourceItem]:
        """The record of each of these documents that a source holds (its key, live link and origin)."""
        ...

    def set_source_item(self, name: str, key: str, item: SourceItem | None) -> None:
        """Record the document the source holds under `key` (None: none any more)."""
        ...

    def close(self) -> None: ...
