"""Approximate vector search: an HNSW graph (usearch) over the exact index's vectors, plus an exact delta.

usearch over hnswlib, measured on 100k clustered 384-d vectors here (on a CPU shared with other work): both
reached recall@10 1.0 at ef 64, hnswlib built in 23 s against 31 s and answered in 0.18 ms against 0.31 ms,
but usearch keeps vectors as float16 (half the memory) and opens a saved graph as a memory map (opening costs
nothing at any size, and processes on one machine share the pages), and it is maintained (hnswlib's last
release is from 2023).

The graph is rebuilt only now and then: vectors added since (the delta) are searched exactly, and removed
chunks are filtered out. Similarities returned are always exact (recomputed from the float32 vectors), so
the gate sees the same cosine distance whichever index found the chunk. A rebuild of more than
hnsw_build.SYNC_BUILD_ROWS vectors runs in the background (hnsw_build.py): the save that finds it due returns at
once, searches keep the old graph and the delta meanwhile, and a later save adopts the finished graph.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from citerag.index import hnsw_build
from citerag.index.base import Allowed
from citerag.index.exact import ExactIndex
from citerag.index.files import load_arrays, new_name, save_arrays
from citerag.index.hnsw_graph import (  # noqa: F401 - the graph's parameters, named here as before
    CONNECTIVITY,
    EXPANSION_ADD,
    EXPANSION_SEARCH,
    MAX_EXPANSION_SEARCH,
    PARALLEL_ADD_ROWS,
    new_graph,
    restore,
    save_graph,
    search_expansion,
)
from citerag.store.base import ChunkBatch

log = logging.getLogger(__name__)

DELTA_ROWS = 256  # the graph absorbs the delta past this many rows, or past DELTA_FRACTION of its size
DELTA_FRACTION = 0.05
DEAD_FRACTION = 0.25  # past this share of removed chunks in the graph, it is rebuilt
# A filtered search over at most this many chunks scans them exactly (recall 1.0, a few ms: 20k rows of 384
# float32 are 31 MB read); above it the graph is walked and its answers filtered, fetching more as the filter
# keeps fewer, which finds enough allowed neighbours only when they are not rare (benchmarks/bench_filtered.py).
EXACT_FILTERED_ROWS = 20_000


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

    def search(self, query: np.ndarray, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        if allowed is not None and allowed.chunks <= EXACT_FILTERED_ROWS:
            return self.exact.search(query, k, allowed)
        q = np.asarray(query, dtype=np.float32)
        documents = self.exact.rows.documents
        ids, sims = [], []
        if self.graph is not None and len(self.graph_ids):
            # Removed chunks are still in the graph (until DEAD_FRACTION), and a filter keeps only its share:
            # over-fetch in proportion, and again if too few of the first answers were live and allowed.
            live_share = max(1.0 - self._dead_in_graph() / len(self.graph_ids), 1.0 - DEAD_FRACTION)
            if allowed is not None:
                live_share *= max(min(allowed.chunks / max(len(self), 1), 1.0), 1e-6)
            fetch = min(int(k / live_share) + 8, len(self.graph_ids))
            while True:
                found = np.asarray(self.graph.search(q, fetch, threads=1).keys, dtype=np.int64)
                rows = self.exact.rows.rows_of(self._live_in_graph(found))
                rows = rows[rows >= 0]
                if allowed is not None:
                    rows = rows[allowed.mask(documents[rows])]
                if len(rows) >= k or fetch >= len(self.graph_ids):
                    break
                fetch = min(fetch * 2, len(self.graph_ids))
            ids.append(self.exact.rows.ids[rows])
            sims.append((self.exact.vectors(rows) @ q).astype(np.float64))
        delta = self.delta_rows()
        if allowed is not None:
            delta = delta[allowed.mask(documents[delta])]
        delta_ids, delta_sims = self.exact.search_rows(q, delta, k)
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
        build = hnsw_build.current(directory)
        if build is not None and not build.running:
            hnsw_build.take(build)
            self._adopt(directory, build)
        if (build is None or not build.running) and self._absorb_due():
            self._absorb(directory)
        state: dict[str, Any] = {"type": self.kind, "exact": exact_state, "graph": self._graph_file,
                                 "graph_ids": None}
        if self._graph_file is not None:
            state["graph_ids"] = new_name("hnsw-ids", ".npz")
            save_arrays(directory / state["graph_ids"], ids=self.graph_ids, live=self.graph_live)
        return state

    def _absorb_due(self) -> bool:
        delta, graph_size = len(self.delta_rows()), len(self.graph_ids)
        return (self.graph is None and delta > 0) or self._dead_in_graph() > DEAD_FRACTION * graph_size or \
            delta > max(DELTA_ROWS, DELTA_FRACTION * graph_size)

    def work_due(self, directory: Path) -> bool:
        """Whether a save here has graph work to do: adopt this process's finished build, or start one that is due."""
        build = hnsw_build.current(directory)
        return not build.running if build is not None else self._absorb_due()

    def _absorb(self, directory: Path) -> None:
        """Make a graph of every live vector (the old one extended, or a new one if much has died): at once when it
        is small, else started in the background (called right after the exact index saved every row)."""
        live = np.flatnonzero(self.exact.rows.live)
        if not len(live):
            self.graph, self._graph_file = None, None
            self.graph_ids, self.graph_live = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
            self._delta = None
            return
        fresh = self.graph is None or self._dead_in_graph() > DEAD_FRACTION * len(self.graph_ids)
        add_rows = live if fresh else self.delta_rows()
        exact_file, vectors = self.exact.saved_vectors()
        ids = self.exact.rows.ids[live]
        order = np.argsort(ids)
        build = hnsw_build.GraphBuild(
            directory, self.dim, started_on=self._graph_file, base_file=None if fresh else self._graph_file,
            remove_keys=np.zeros(0, dtype=np.int64) if fresh else self.graph_ids[~self.graph_live],
            add_rows=add_rows, add_ids=self.exact.rows.ids[add_rows], vectors=vectors, exact_file=exact_file,
            ids=ids[order], rows=live[order])
        if len(add_rows) > hnsw_build.SYNC_BUILD_ROWS:
            hnsw_build.stage(build)  # launched once the manifest naming this state is written (SearchIndexes.save)
            return
        build.name = new_name("hnsw-graph", ".usearch")  # the manifest names it before this writer lets go
        hnsw_build.run(build)
        if build.error is not None:
            raise build.error
        self._adopt(directory, build)

    def _adopt(self, directory: Path, build: hnsw_build.GraphBuild) -> None:
        """Take a finished graph if it was built on top of this state's graph; else drop it (the next save
        starts another if one is still due). Its ids still live in the same exact row are live in it; the rest
        (removed since, or removed and added again as a new row) are dead in it, and rows added since stay in the
        delta. Rows are compared only within one vectors file: after a compaction the build is dropped."""
        if build.state != hnsw_build.DONE or build.started_on != self._graph_file or build.dim != self.dim or \
                build.exact_file != self.exact.saved_vectors()[0]:
            if build.state == hnsw_build.DONE:
                log.info("HNSW graph built in %s dropped: the index changed under it", directory)
            build.discard()
            return
        try:
            if build.name.startswith(hnsw_build.BUILD_PREFIX):
                # Renamed as any graph: a clean-up spares build files while their process lives, which must not
                # keep this one once a later graph replaces it. Under the writers' lock, as every clean-up.
                name = new_name("hnsw-graph", ".usearch")
                os.replace(directory / build.name, directory / name)
                build.name = name
            graph = restore(directory / build.name, view=True)
        except OSError as exc:  # removed meanwhile (e.g. judged stale): only the work is lost
            log.warning("HNSW graph built in %s not adopted (%s)", directory, exc)
            build.discard()
            return
        self.graph, self._graph_file = graph, build.name
        self.graph_ids, self.graph_live = build.ids, self.exact.rows.rows_of(build.ids) == build.rows
        self._delta = None

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any]) -> HnswIndex:
        exact = ExactIndex.load(directory, state["exact"])
        if state["graph"] is None:
            return cls(exact)
        graph = restore(directory / state["graph"], view=True)
        table = load_arrays(directory / state["graph_ids"])
        return cls(exact, graph, table["ids"], table["live"], state["graph"])

    @staticmethod
    def files(state: dict[str, Any]) -> set[str]:
        return ExactIndex.files(state["exact"]) | ({state["graph"], state["graph_ids"]} - {None})
