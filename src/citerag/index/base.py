"""Search indexes: a vector index and a lexical index beside the store, keyed by stored chunk id.

The store is the truth; an index is derived from it and can always be rebuilt. Each index records the store
generation it reflects, and `citerag.index.sync` brings it forward from the store's change log one document
at a time. Rows are an index's own layout (appended, tombstoned, compacted); callers only ever see chunk ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from citerag.store.base import ChunkBatch, Store, StoreView


def idf_mass(n: int, df: Mapping[str, int], terms: Sequence[str]) -> float:
    """Σ idf over `terms` (repeats counted again) among `n` live chunks, with the reference's idf
    ln(1 + (n - df + 0.5) / (df + 0.5)); a term missing from `df` has df = 0. LexicalIndex.query_mass."""
    if not n:
        return 0.0
    return sum(math.log(1 + (n - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)) for t in terms)


@dataclass(frozen=True)
class Allowed:
    """The documents a filtered search may return: the caller's filters resolved against one store view
    (citerag.search.filters). Each index applies it while it ranks, so a filtered top-k is the best k of these
    documents' chunks, never fewer because hits were dropped after an unfiltered search."""

    documents: np.ndarray  # sorted, unique document ids
    chunks: int  # the chunks they hold: an approximate index scans them exactly below a threshold
    # The documents a caller may read, when it may not read them all (document permissions): a lexical index's
    # statistics (N, df, the mean length) are theirs, so that the documents it may not read change no score, as if
    # they did not exist. None: the collection's own (metadata filters alone keep them).
    visible: np.ndarray | None = None

    @classmethod
    def of(cls, documents: Iterable[int], chunks: int, visible: Iterable[int] | None = None) -> Allowed:
        return cls(np.unique(np.fromiter(documents, dtype=np.int64)), int(chunks),
                   None if visible is None else np.unique(np.fromiter(visible, dtype=np.int64)))

    def readable(self) -> Allowed | None:
        """The documents the statistics count, as an Allowed (None: every document)."""
        return None if self.visible is None else Allowed(self.visible, 0)

    def mask(self, documents: np.ndarray) -> np.ndarray:
        """Whether each of these document ids is allowed."""
        documents = np.asarray(documents, dtype=np.int64)
        if not len(self.documents):
            return np.zeros(len(documents), dtype=bool)
        at = np.minimum(np.searchsorted(self.documents, documents), len(self.documents) - 1)
        return self.documents[at] == documents


class VectorIndex(Protocol):
    """Unit vectors by chunk id; similarity is the dot product (cosine, as the vectors are unit length)."""

    dim: int

    def __len__(self) -> int:
        """Live (searchable) vectors."""
        ...

    def add(self, batch: ChunkBatch) -> None:
        """Index a batch; its documents must have been removed first if they were indexed before."""
        ...

    def remove_documents(self, document_ids: Iterable[int]) -> None: ...

    def search(self, query: np.ndarray, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k most similar live chunks (of `allowed`'s documents only, when given): (chunk ids, cosine
        similarities), best first, ties by chunk id."""
        ...

    def similarity(self, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Exact cosine similarity of the query to each of these live chunk ids."""
        ...

    def save(self, directory: Path) -> dict[str, Any]:
        """Write what is not on disk yet into `directory`; the state that `load` reopens it from.

        Files that readers of an earlier state may have open are never changed in place below that state's rows.
        """
        ...


class LexicalIndex(Protocol):
    """BM25 over chunk texts; scores equal the reference formula over the live chunks."""

    def __len__(self) -> int: ...

    def add(self, batch: ChunkBatch) -> None: ...

    def remove_documents(self, document_ids: Iterable[int]) -> None: ...

    def search(self, query: str, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The k best-scoring live chunks (of `allowed`'s documents only, when given) with a score above zero:
        (chunk ids, scores), best first, ties by id. Scores stay the collection's: N, df and the mean length
        are over every live chunk, as an unfiltered search's, or over `allowed.visible`'s when it is set."""
        ...

    def query_mass(self, query: str, allowed: Allowed | None = None) -> float:
        """The sum of the idf of the query's terms (repeats counted again, as `search` scores them), a term no live
        chunk holds counted at df = 0: about what a chunk of average length holding each term once would score,
        so a score divided by it is the share of the query's lexical evidence a chunk holds
        (citerag.search.fusion). 0.0 for a query without terms or an empty index. With `allowed.visible`, over
        those documents' chunks, as `search` scores them."""
        ...

    def save(self, directory: Path) -> dict[str, Any]: ...


@dataclass
class SearchPair:
    """A collection's two indexes as one search sees them: `empty` when no chunk of the model is searchable;
    `applied` is how many documents were caught up for it (-1: rebuilt from the whole store)."""

    vector: VectorIndex | None
    lexical: LexicalIndex
    empty: bool
    applied: int = 0


class SearchBackend(Protocol):
    """Where a collection's indexes live: files beside an embedded store, or tables in a server store."""

    def reading(self) -> AbstractContextManager[object]:
        """Held while a search opens its store view and uses the indexes: where the indexes are shared by a
        process's threads, a view opened after another search caught them up is at least as new as they are."""
        ...

    def open(self, view: StoreView) -> AbstractContextManager[SearchPair]:
        """The indexes as of the view's commit, for one search (inside `reading()`)."""
        ...

    def persist(self, store: Store) -> None:
        """After a write: make what the write changed durable for the next process (never raises)."""
        ...

    def close(self, store: Store) -> None:
        """Before the collection closes: finish background index work and save it (an HNSW graph being built)."""
        ...


class Rows:
    """An index's row table: the chunk id and document of each row, tombstones, and lookups by id.

    Rows are appended and never reused until compaction, so a row number stays valid in files already written.
    """

    def __init__(self, ids: np.ndarray | None = None, documents: np.ndarray | None = None) -> None:
        self.ids = np.zeros(0, dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64)
        self.documents = np.zeros(0, dtype=np.int64) if documents is None else np.asarray(documents, dtype=np.int64)
        self.live = self.ids >= 0
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def live_count(self) -> int:
        return int(self.live.sum())

    def append(self, ids: np.ndarray, documents: np.ndarray) -> np.ndarray:
        """Rows given to these chunks."""
        start = len(self.ids)
        self.ids = np.concatenate([self.ids, np.asarray(ids, dtype=np.int64)])
        self.documents = np.concatenate([self.documents, np.asarray(documents, dtype=np.int64)])
        self.live = np.concatenate([self.live, np.ones(len(ids), dtype=bool)])
        self._sorted = None
        return np.arange(start, len(self.ids))

    def remove_documents(self, document_ids: Iterable[int]) -> np.ndarray:
        """Tombstone the rows of these documents; the chunk ids removed."""
        gone = np.flatnonzero(np.isin(self.documents, np.fromiter(document_ids, dtype=np.int64)) & self.live)
        removed = self.ids[gone].copy()
        self.live[gone] = False
        self.ids[gone] = -1
        self._sorted = None
        return removed

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Row of each live chunk id; -1 where the id is not live here."""
        if self._sorted is None:
            order = np.flatnonzero(self.live)
            order = order[np.argsort(self.ids[order], kind="stable")]
            self._sorted = (self.ids[order], order)
        keys, rows = self._sorted
        ids = np.asarray(ids, dtype=np.int64)
        if not len(keys):
            return np.full(len(ids), -1, dtype=np.int64)
        at = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        return np.where(keys[at] == ids, rows[at], -1)

    def allowed(self, allowed: Allowed | None) -> np.ndarray:
        """The live rows a search may return, as a mask."""
        return self.live if allowed is None else self.live & allowed.mask(self.documents)

    def best(self, scores: np.ndarray, k: int, positive: bool = False,
             usable: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids, scores) of the k best live rows (of the `usable` mask, when given), best first, ties by chunk
        id; `positive`: scores > 0 only."""
        usable = self.live if usable is None else usable
        candidates = np.flatnonzero(usable & (scores > 0) if positive else usable)
        return best_of(self.ids[candidates], scores[candidates], k)


def best_of(ids: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of these (chunk id, score) pairs, best first, ties by id: every pair tied with the k-th score
    competes, so that the tie-break by id is global."""
    if k <= 0 or not len(ids):
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    if len(ids) > k:
        keep = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
        ids, scores = ids[keep], scores[keep]
    order = np.lexsort((ids, -scores))[:k]
    return ids[order], scores[order]
