"""Target 5's worst case in bench_scale.py's run, since issue 31: the add whose save finds the HNSW delta past the
threshold starts the graph build in the background (citerag.index.hnsw_build) instead of rewriting the graph
inside the save. Measured on a scratch copy of a size's hnsw index (bench_scale.absorb_worst_case makes it):

1. the delta is filled to one 50-chunk document short of the threshold (one untimed batch: the adds of the
   thousands of documents before), then one 50-chunk document is added and saved: the save that starts the build;
2. while the graph builds, one 50-chunk document is added and saved every ADD_EVERY_S, each save timed, and
   SEARCHES vector searches (k 10) are timed after each (readers: the old graph plus the exact delta), and as
   many three times over before the build, for comparison;
3. once the build ends, the save that adopts the new graph.

Every save is `SearchIndexes.save` (the vector and BM25 indexes and the manifest, as persist writes them, minus
the store's catch-up read of the document, which the ordinary add of target 5 measures).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from citerag.index import hnsw_build, sync
from citerag.index.hnsw import DELTA_FRACTION, DELTA_ROWS, HnswIndex
from citerag.store.base import ChunkBatch

ADD_EVERY_S = 1.0
SEARCHES = 5


def _save(indexes: sync.SearchIndexes, batch: ChunkBatch | None) -> float:
    """Add the batch to both indexes (if any), then the save's seconds."""
    if batch is not None:
        assert indexes.vector is not None
        indexes.vector.add(batch)
        indexes.lexical.add(batch)
    t = time.perf_counter()
    indexes.save()
    return time.perf_counter() - t


def measure(copy: Path, model: str, make_batch: Callable[[HnswIndex, int], ChunkBatch], document: int,
            qvecs: np.ndarray, note: Callable[[str], None]) -> dict[str, Any]:
    """The figures above on the hnsw index in `copy` (changed: the caller deletes it). `make_batch(vector, n)`:
    n new chunks of one new document."""
    indexes = sync.load(copy, model, "hnsw")
    vector = indexes.vector
    if not isinstance(vector, HnswIndex) or vector.graph is None:
        raise RuntimeError(f"the hnsw index copied to {copy} has no graph ({type(vector)})")
    old_graph = vector._graph_file
    graph_size = len(vector.graph_ids)
    threshold = max(DELTA_ROWS, DELTA_FRACTION * graph_size)
    fill = math.floor(threshold) + 1 - len(vector.delta_rows()) - document
    if fill > 0:
        note(f"  background build: filling the delta with {fill:,} rows (untimed)")
        _save(indexes, make_batch(vector, fill))
    if hnsw_build.current(copy) is not None or len(vector.delta_rows()) > threshold:
        raise RuntimeError("a graph build started before the delta reached its threshold")
    before: list[float] = []
    for q in qvecs[:SEARCHES] if len(qvecs) else []:
        vector.search(q, 10)  # the copy's pages read once
    for _ in range(3):
        for q in qvecs[:SEARCHES]:
            t = time.perf_counter()
            vector.search(q, 10)
            before.append(time.perf_counter() - t)
    delta = len(vector.delta_rows()) + document
    note(f"  background build: the add that takes the delta to {delta:,} rows (threshold {threshold:,.0f}) in a "
         f"{graph_size:,}-chunk graph")
    started = time.perf_counter()
    trigger_s = _save(indexes, make_batch(vector, document))
    build = hnsw_build.current(copy)
    if build is None or not build.running:
        raise RuntimeError(f"the save did not start a background build ({build and build.state})")
    during: list[float] = []
    searches: list[float] = []
    while not build.wait(ADD_EVERY_S):
        during.append(_save(indexes, make_batch(vector, document)))
        for q in qvecs[:SEARCHES]:
            t = time.perf_counter()
            vector.search(q, 10)
            searches.append(time.perf_counter() - t)
    if build.state != hnsw_build.DONE:
        raise RuntimeError(f"the background build ended {build.state}: {build.error}")
    adopt_s = _save(indexes, None)
    adopted_s = time.perf_counter() - started
    added_since = document * len(during)
    if vector._graph_file != build.name or vector._graph_file == old_graph or \
            len(vector.delta_rows()) != added_since or len(vector.graph_ids) != len(vector) - added_since:
        raise RuntimeError(f"the graph was not adopted: graph {old_graph} -> {vector._graph_file} (built "
                           f"{build.name}), {len(vector.delta_rows())} delta rows, graph of {len(vector.graph_ids):,}")
    note(f"  background build: {build.seconds:.1f} s, {len(during)} adds meanwhile, adopted after {adopted_s:.1f} s")
    return {"trigger_s": trigger_s, "during_s": during, "search_during_s": searches,
            "search_before_s": before, "build_s": build.seconds,
            "adopt_s": adopt_s, "adopted_s": adopted_s, "add_every_s": ADD_EVERY_S, "rows": delta, "fill": fill,
            "threshold": threshold, "graph_size": graph_size}
