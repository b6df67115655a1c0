"""Approximate vector search: an HNSW graph (usearch) over the exact index's vectors, plus an exact delta.

usearch over hnswlib, measured on 100k clustered 384-d vectors here (on a CPU shared with other work): both
reached recall@10 1.0 at ef 64, hnswlib built in 23 s against 31 s and answered in 0.18 ms against 0.31 ms,
but usearch keeps vectors as float16 (half the memory) and opens a saved graph as a memory map (opening costs
nothing at any size, and processes on one machine share the pages), and it is maintained (hnswlib's last
release is from 2023).

The graph is rebuilt only now and then: vectors added since (the delta) are searched exactly, and removed
chunks are filtered out. Similarities returned are always exact (recomputed from the float32 vectors), so
the gate sees the same cosine distance whichever index found the chunk.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from citerag.index.exact import ExactIndex
from citerag.index.files import fsync_path, load_arrays, new_name, save_arrays, write_error
from citerag.store.base import ChunkBatch

# Measured on the scale benchmark's vectors (near-copies of the 1,343 dev-set chunk vectors at cosine 0.84-0.91
# to their source, so a query's 10th and 11th neighbours differ by about 0.0007), queries the 80 dev questions,
# recall@10 against exact. 100k: M 16 / ef 64 0.906, M 16 / ef 256 0.982, M 32 / ef 256 0.999 (0.73 ms p95);
# float32 storage instead of float16 gained under 0.01. 1M (745 near-copies per chunk), M 32: ef 256 0.849,
# 1024 0.968, 4096 0.974, 8192 0.999 (21.5 ms p95); fetching 500 candidates instead of k and rescoring them
# exactly gained nothing. So the search breadth grows with the graph: `search_expansion`.
CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 256  # the least breadth, for graphs up to 32k vectors
MAX_EXPANSION_SEARCH = 8192
DELTA_ROWS = 256  # the graph absorbs the delta past this many rows, or past DELTA_FRACTION of its size
DELTA_FRACTION = 0.05
DEAD_FRACTION = 0.25  # past this share of removed chunks in the graph, it is rebuilt
PARALLEL_ADD_ROWS = 50_000


def _usearch() -> Any:
    """usearch's Index class, imported after onnxruntime: loading onnxruntime 1.31.1 once usearch 2.26.6 is
    loaded crashes the process (SIGSEGV in libstdc++'s codecvt), and the query encoder loads it lazily."""
    import onnxruntime  # noqa: F401
    from usearch.index import Index

    return Index


def search_expansion(graph_size: int) -> int:
    """The search breadth (ef) for a graph of this many vectors: size / 128 rounded up to a power of two,
    between EXPANSION_SEARCH and MAX_EXPANSION_SEARCH (256 up to 32k vectors, 1024 at 100k, 8192 at 1M)."""
    wanted = 1 << max(int(np.ceil(np.log2(max(graph_size, 1) / 128))), 0)
    return int(min(max(wanted, EXPANSION_SEARCH), MAX_EXPANSION_SEARCH))


def _restore(path: Path, view: bool) -> Any:
    try:
        graph = _usearch().restore(str(path), view=view)
    except RuntimeError as exc:  # e.g. "File is corrupted and can't fit all the nodes": the caller rebuilds
        raise OSError(f"HNSW graph {path} is unreadable ({exc})") from exc
    if graph is None:
        raise OSError(f"HNSW graph {path} is unreadable")
    graph.expansion_search = search_expansion(graph.size)  # not kept in the file: a restored graph would use 64
    return graph


def _new_graph(dim: int) -> Any:
    return _usearch()(ndim=dim, metric="cos", dtype="f16", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
                 expansion_search=EXPANSION_SEARCH)


class HnswIndex:
    kind = "hnsw"

    def __init__(self, exact: ExactIndex, graph: Any = None, graph_ids: np.ndarray | None = None,
                 graph_live: np.ndarray | None = None, graph_file: str | None = None) -> None:
        self.exact = exact
        self.dim = exact.dim
        self.graph = graph
        self.graph_ids = np.zeros(0, dtype=np.int64) if graph_ids is None else np.asarray(graph_ids)  # sorted
        # False where the graph's vector for that id was removed (and may have come back as another chunk's).
        self.graph_live = np.ones(len(self.graph_ids), dtype=bool) if graph_live is None else \
            np.array(graph_live, dtype=bool)
        self._graph_file = graph_file
        self._delta: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.exact)

    def add(self, batch: ChunkBatch) -> None:
        self.exact.add(batch)
        self._delta = None

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        removed = self.exact.remove(document_ids)
        if len(self.graph_ids) and len(removed):
            at = np.minimum(np.searchsorted(self.graph_ids, removed), len(self.graph_ids) - 1)
            self.graph_live[at[self.graph_ids[at] == removed]] = False
        self._delta = None

    def delta_rows(self) -> np.ndarray:
        """Live rows of the exact index that the graph does not hold."""
        if self._delta is None:
            rows = np.flatnonzero(self.exact.rows.live)
            self._delta = rows[~np.isin(self.exact.rows.ids[rows], self.graph_ids[self.graph_live])]
        return self._delta

    def _dead_in_graph(self) -> int:
        return int(len(self.graph_live) - self.graph_live.sum())

    def _live_in_graph(self, keys: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(self.graph_ids, keys), len(self.graph_ids) - 1)
        return keys[(self.graph_ids[at] == keys) & self.graph_live[at]]

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        q = np.asarray(query, dtype=np.float32)
        ids, sims = [], []
        if self.graph is not None and len(self.graph_ids):
            # Removed chunks are still in the graph (until DEAD_FRACTION): over-fetch in proportion, and again
            # if too many of the first answers were dead.
            live_share = max(1.0 - self._dead_in_graph() / len(self.graph_ids), 1.0 - DEAD_FRACTION)
            fetch = min(int(k / live_share) + 8, len(self.graph_ids))
            while True:
                found = np.asarray(self.graph.search(q, fetch, threads=1).keys, dtype=np.int64)
                rows = self.exact.rows.rows_of(self._live_in_graph(found))
                rows = rows[rows >= 0]
                if len(rows) >= k or fetch >= len(self.graph_ids):
                    break
                fetch = min(fetch * 2, len(self.graph_ids))
            ids.append(self.exact.rows.ids[rows])
            sims.append((self.exact.vectors(rows) @ q).astype(np.float64))
        delta_ids, delta_sims = self.exact.search_rows(q, self.delta_rows(), k)
        ids.append(delta_ids)
        sims.append(delta_sims)
        all_ids, all_sims = np.concatenate(ids), np.concatenate(sims)
        order = np.lexsort((all_ids, -all_sims))[:k]
        return all_ids[order], all_sims[order]

    def similarity(self, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
        return self.exact.similarity(query, ids)

    def save(self, directory: Path) -> dict[str, Any]:
        exact_state = self.exact.save(directory)
        self._delta = None  # compaction renumbers rows
        delta, graph_size = len(self.delta_rows()), len(self.graph_ids)
        if (self.graph is None and delta) or self._dead_in_graph() > DEAD_FRACTION * graph_size or \
                delta > max(DELTA_ROWS, DELTA_FRACTION * graph_size):
            self._absorb(directory)
        state: dict[str, Any] = {"type": self.kind, "exact": exact_state, "graph": self._graph_file,
                                 "graph_ids": None}
        if self._graph_file is not None:
            state["graph_ids"] = new_name("hnsw-ids", ".npz")
            save_arrays(directory / state["graph_ids"], ids=self.graph_ids, live=self.graph_live)
        return state

    def _absorb(self, directory: Path) -> None:
        """Write a graph holding every live vector: the old one extended, or a new one if much has died."""
        live = np.flatnonzero(self.exact.rows.live)
        if not len(live):
            self.graph, self._graph_file = None, None
            self.graph_ids, self.graph_live = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
            self._delta = None
            return
        dead = self._dead_in_graph()
        if self.graph is None or dead > DEAD_FRACTION * len(self.graph_ids):
            graph, rows = _new_graph(self.dim), live
        else:
            graph = _restore(directory / str(self._graph_file), view=False)  # a view cannot be extended
            if dead:
                graph.remove(self.graph_ids[~self.graph_live])
            rows = self.delta_rows()
        # usearch's parallel insertion leaves a few nodes unreachable (measured: 2-3 of 600 random vectors, 1 in
        # 5,000 at 20k); one thread builds small batches exactly, and large ones are where threads pay off.
        threads = 0 if len(rows) >= PARALLEL_ADD_ROWS else 1
        for start in range(0, len(rows), 65_536):
            part = rows[start:start + 65_536]
            graph.add(self.exact.rows.ids[part], self.exact.vectors(part), threads=threads)
        name = new_name("hnsw-graph", ".usearch")
        _save_graph(graph, directory / name)
        fsync_path(directory / name)
        self.graph_ids = np.sort(self.exact.rows.ids[live])
        self.graph_live = np.ones(len(self.graph_ids), dtype=bool)
        self._graph_file = name
        self.graph = _restore(directory / name, view=True)
        self._delta = None

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any]) -> HnswIndex:
        exact = ExactIndex.load(directory, state["exact"])
        if state["graph"] is None:
            return cls(exact)
        graph = _restore(directory / state["graph"], view=True)
        table = load_arrays(directory / state["graph_ids"])
        return cls(exact, graph, table["ids"], table["live"], state["graph"])

    @staticmethod
    def files(state: dict[str, Any]) -> set[str]:
        return ExactIndex.files(state["exact"]) | ({state["graph"], state["graph_ids"]} - {None})


def _save_graph(graph: Any, path: Path) -> None:
    """Write the graph; a failed write is an OSError naming its cause, as every other index file's (a save that
    fails loses nothing: the store has committed, the indexes catch up from it), and frees its room at once."""
    try:
        graph.save(str(path))
        # usearch may report success for a file it could not finish (measured: a full tmpfs left a graph that
        # its restore calls corrupted); the length it meant to write says.
        if (written := path.stat().st_size) != graph.serialized_length:
            raise RuntimeError(f"{written} of {graph.serialized_length} bytes written")
    except RuntimeError as exc:  # usearch says only "Failed to serialize into stream", whatever the cause
        error = write_error(path, exc)
        path.unlink(missing_ok=True)
        raise error from exc
