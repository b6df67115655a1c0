"""Exact vector search over a memory-mapped float32 file: the reference every approximate index is measured by.

Rows are appended to the file and tombstoned on removal, so adding one document writes only its vectors and
the row table; the file is rewritten (compacted) when a quarter of its rows are dead. Readers map the file, so
opening a large index costs no read of it, and the kernel shares its pages between processes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from citerag.index.base import Allowed, Rows, best_of
from citerag.index.files import fsync_path, load_arrays, new_name, save_arrays
from citerag.store.base import ChunkBatch

COMPACT_DEAD_FRACTION = 0.25


class ExactIndex:
    kind = "exact"

    def __init__(self, dim: int, rows: Rows | None = None, stored: np.ndarray | None = None,
                 file: str | None = None) -> None:
        self.dim = dim
        self.rows = rows or Rows()
        self._stored = stored if stored is not None else np.zeros((0, dim), dtype=np.float32)  # on disk, mapped
        self._file = file
        self._tail: list[np.ndarray] = []  # added since the last save, in row order after the stored rows
        self._tail_matrix: np.ndarray | None = None

    def __len__(self) -> int:
        return self.rows.live_count

    def add(self, batch: ChunkBatch) -> None:
        if not len(batch):
            return
        vectors = np.ascontiguousarray(batch.vectors, dtype=np.float32)
        if vectors.shape[1] != self.dim:
            raise ValueError(f"vectors of dimension {vectors.shape[1]} in an index of dimension {self.dim}")
        self.rows.append(batch.ids, batch.document_ids)
        self._tail.append(vectors)
        self._tail_matrix = None

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        self.remove(document_ids)

    def remove(self, document_ids: Iterable[int]) -> np.ndarray:
        """Tombstone the documents' rows; the chunk ids removed."""
        return self.rows.remove_documents(document_ids)

    def _tail_rows(self) -> np.ndarray:
        if self._tail_matrix is None:
            self._tail_matrix = np.concatenate(self._tail) if self._tail else np.zeros((0, self.dim), np.float32)
            self._tail = [self._tail_matrix] if len(self._tail_matrix) else []
        return self._tail_matrix

    def scores(self, query: np.ndarray) -> np.ndarray:
        """Cosine similarity of every row, dead ones included (callers mask with `rows.live`)."""
        q = np.asarray(query, dtype=np.float32)
        return np.concatenate([self._stored @ q, self._tail_rows() @ q])

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        stored = len(self._stored)
        rows = np.asarray(rows, dtype=np.int64)
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        low = rows < stored
        out[low] = self._stored[rows[low]]
        out[~low] = self._tail_rows()[rows[~low] - stored]
        return out

    def search(self, query: np.ndarray, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        if allowed is None:
            return self.rows.best(self.scores(query), k)
        usable = self.rows.allowed(allowed)
        rows = np.flatnonzero(usable)
        if len(rows) * 4 < len(self.rows):  # a few rows: score only them
            return self.search_rows(query, rows, k)
        return self.rows.best(self.scores(query), k, usable=usable)

    def search_rows(self, query: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best among these live rows only (a filter's documents, an approximate index's unindexed delta)."""
        if not len(rows) or k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        sims = self.row_scores(rows, np.asarray(query, dtype=np.float32))
        return best_of(self.rows.ids[rows], sims.astype(np.float64), k)

    def row_scores(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """Cosine similarity of each of these rows (ascending). A document's chunks are appended together, so a
        filter's rows come in runs: each run is scored in place in the mapped file, where copying the rows out
        first (fancy indexing) cost more than scoring all 100k rows once a filter kept 5 % of them."""
        cuts = np.flatnonzero(np.diff(rows) != 1) + 1
        if len(cuts) * 16 > len(rows):  # scattered rows: one copy is cheaper than many small products
            return self.vectors(rows) @ q
        stored, tail = len(self._stored), None
        out = np.empty(len(rows), dtype=np.float32)
        for at, run in zip(np.concatenate([[0], cuts]).tolist(), np.split(rows, cuts), strict=True):
            first, last = int(run[0]), int(run[-1]) + 1
            if last <= stored:
                out[at:at + len(run)] = self._stored[first:last] @ q
            elif first >= stored:
                tail = self._tail_rows() if tail is None else tail
                out[at:at + len(run)] = tail[first - stored:last - stored] @ q
            else:
                out[at:at + len(run)] = self.vectors(run) @ q
        return out

    def similarity(self, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
        rows = self.rows.rows_of(ids)
        if (rows < 0).any():
            raise KeyError(f"chunk ids not in the index: {np.asarray(ids)[rows < 0][:5].tolist()}")
        return (self.vectors(rows) @ np.asarray(query, dtype=np.float32)).astype(np.float64)

    def save(self, directory: Path) -> dict[str, Any]:
        dead = len(self.rows) - self.rows.live_count
        if self._file is None or (len(self.rows) and dead > COMPACT_DEAD_FRACTION * len(self.rows)):
            self._compact(directory)
        elif self._tail:
            self._append(directory / self._file)
        table = new_name("exact-rows", ".npz")
        save_arrays(directory / table, ids=self.rows.ids, documents=self.rows.documents)
        return {"type": self.kind, "dim": self.dim, "rows": len(self.rows), "vectors": self._file, "table": table}

    def saved_vectors(self) -> tuple[str | None, np.ndarray]:
        """The vectors file and its rows, memory-mapped; right after `save` that is every row. Rows below this count
        never change under the file's name (appends go after them, a compaction writes a new file), and the map
        keeps them readable even once a later state no longer names the file (an HNSW build reads them)."""
        if self._tail:
            raise RuntimeError("rows added since the last save are not in the vectors file")
        return self._file, self._stored

    def _append(self, path: Path) -> None:
        tail = self._tail_rows()
        stored = len(self._stored)
        with open(path, "r+b") as f:
            # Past `stored` rows the file holds nothing any state names (a writer that died after appending).
            f.truncate(stored * self.dim * 4)
            f.seek(0, 2)
            f.write(tail.tobytes())
            f.flush()
        fsync_path(path)
        self._remap(path, stored + len(tail))

    def _compact(self, directory: Path) -> None:
        live = np.flatnonzero(self.rows.live)
        name = new_name("exact-vectors", ".f32")
        with open(directory / name, "wb") as f:
            for start in range(0, len(live), 65_536):
                f.write(np.ascontiguousarray(self.vectors(live[start:start + 65_536])).tobytes())
            f.flush()
        fsync_path(directory / name)
        self.rows = Rows(self.rows.ids[live], self.rows.documents[live])
        self._file = name
        self._remap(directory / name, len(live))

    def _remap(self, path: Path, count: int) -> None:
        self._tail, self._tail_matrix = [], None
        self._stored = np.memmap(path, dtype=np.float32, mode="r", shape=(count, self.dim)) if count \
            else np.zeros((0, self.dim), dtype=np.float32)

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any]) -> ExactIndex:
        table = load_arrays(directory / state["table"])
        dim, count = int(state["dim"]), int(state["rows"])
        stored = np.memmap(directory / state["vectors"], dtype=np.float32, mode="r", shape=(count, dim)) if count \
            else np.zeros((0, dim), dtype=np.float32)
        return cls(dim, Rows(table["ids"], table["documents"]), stored, state["vectors"])

    @staticmethod
    def files(state: dict[str, Any]) -> set[str]:
        return {state["vectors"], state["table"]}
