"""The usearch graph itself, shared by the index (hnsw.py) and the background builds (hnsw_build.py): its
parameters, how a graph is made, opened and written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from citerag.index.files import write_error

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
PARALLEL_ADD_ROWS = 50_000


def usearch_index() -> Any:
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


def restore(path: Path, view: bool) -> Any:
    try:
        graph = usearch_index().restore(str(path), view=view)
    except RuntimeError as exc:  # e.g. "File is corrupted and can't fit all the nodes": the caller rebuilds
        raise OSError(f"HNSW graph {path} is unreadable ({exc})") from exc
    if graph is None:
        raise OSError(f"HNSW graph {path} is unreadable")
    graph.expansion_search = search_expansion(graph.size)  # not kept in the file: a restored graph would use 64
    return graph


def new_graph(dim: int) -> Any:
    return usearch_index()(ndim=dim, metric="cos", dtype="f16", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
                 expansion_search=EXPANSION_SEARCH)


def save_graph(graph: Any, path: Path) -> None:
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
