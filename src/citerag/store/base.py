"""The store contract: documents, chunks and vectors, one transaction per document."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from citerag.types import Chunk, Document, Locator, StoredChunk


@dataclass
class ChunkStats:
    """Per-document embedding figures, stored so that `status` and the evaluation can report them."""

    tokens: list[int] = field(default_factory=list)
    header_tokens: list[int] = field(default_factory=list)


@dataclass
class Snapshot:
    """Everything search needs, read once: chunks in a fixed order and their vectors, row for row."""

    chunks: list[StoredChunk]
    documents: dict[int, Document]
    vectors: np.ndarray
    excluded_documents: int = 0  # indexed with another embedding model: never mixed in


class Store(Protocol):
    def documents(self) -> list[Document]: ...

    def document(self, doc_id: int) -> Document | None: ...

    def document_by_path(self, source_path: str) -> Document | None: ...

    def add_pending(self, source_path: str, name: str, sha256: str) -> int: ...

    def save_indexed(self, doc_id: int, *, title: str, sha256: str, stamps: dict[str, Any],
                     canonical_text: str, warnings: list[str], chunks: list[Chunk], vectors: np.ndarray,
                     stats: ChunkStats, locators: list[Locator] | None = None) -> None: ...

    def save_failed(self, doc_id: int, *, sha256: str, stamps: dict[str, Any], error: str) -> None: ...

    def delete(self, doc_id: int) -> None: ...

    def canonical_text(self, doc_id: int) -> str: ...

    def locators(self, doc_id: int) -> list[Locator]:
        """The extractor's locator map for the document (empty for plain text formats)."""
        ...

    def chunk_stats(self) -> dict[int, ChunkStats]: ...

    def snapshot(self, embedding_model: str) -> Snapshot: ...

    def close(self) -> None: ...
