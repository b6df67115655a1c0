"""Filtered BM25 at 100,000 chunks: the latency of the embedded Bm25Index and of PgBm25Index when a filter keeps
1 %, 5 %, 20 % or 50 % of the documents, beside the unfiltered search; and when the same documents are all a caller
may read (document permissions, "as a reader": N, df and the mean length counted over them, Allowed.visible).

    .venv/bin/python benchmarks/bench_filtered_bm25.py                  # 100,000 chunks (a few minutes)
    .venv/bin/python benchmarks/bench_filtered_bm25.py --chunks 10000   # any multiple of 50, for a quick look

Data: bench_pg_bm25.py's texts (the dev set's strategy-E chunks repeated, three words replaced, fixed seed), 50
chunks a document (2,000 documents at 100k), chunk ids 1.. and document ids 1.. in order, each document added by
its own `add` (a transaction each on PostgreSQL, merges as in ingestion). Embedded: Bm25Index built so, saved into
a temporary folder and loaded from it, as a collection's index is opened. PostgreSQL: an embedded server kept
under --data (delete it to load again), VACUUM ANALYZE after the load, each search in a REPEATABLE READ
transaction as a store view searches. Queries: bench_pg_bm25.py's, the 80 dev questions, k = 10. Filters:
bench_filtered.py's (a random share of the documents, one fixed seed, as citerag.index.base.Allowed).

Filtered results are exact by construction (the tests prove them equal to the unfiltered ranking restricted to
the allowed documents), so only time is measured; the warm-up round checks that both backends return the same
chunk ids and scores. Per backend and filter: the median over the rounds of each round's p50 and p95 (the two
CPUs may be shared; other processes' CPU use during the searches is recorded). The queries visit the backends in
turn, so that both meet the same load from other processes.

Writes benchmarks/results/filtered_bm25.json (or --json) and prints a table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_filtered import SHARES, filters, finish  # noqa: E402 - the benchmarks folder is not a package
from bench_scale import cpu_mark, ms, note, others_since, table  # noqa: E402

from citerag.index.base import Allowed  # noqa: E402
from citerag.index.bm25 import Bm25Index  # noqa: E402
from citerag.store.base import ChunkBatch  # noqa: E402

# Imported by name, as bench_scale imports bench_query_embedding: mypy does not check that script's own typing.
bench_pg_bm25: Any = importlib.import_module("bench_pg_bm25")
COLLECTION, DEV, MODEL, PER_DOCUMENT = (bench_pg_bm25.COLLECTION, bench_pg_bm25.DEV, bench_pg_bm25.MODEL,
                                        bench_pg_bm25.PER_DOCUMENT)

SIZE = 100_000
K = 10
ROUNDS = 3
RESULTS = HERE / "results" / "filtered_bm25.json"
Search = Callable[[str, Allowed | None], tuple[np.ndarray, np.ndarray]]


def batches(all_texts: list[str]) -> list[ChunkBatch]:
    """One batch a document, as bench_pg_bm25.load adds them."""
    out = []
    for doc in range(len(all_texts) // PER_DOCUMENT):
        ids = np.arange(doc * PER_DOCUMENT, (doc + 1) * PER_DOCUMENT) + 1
        out.append(ChunkBatch(ids=ids, document_ids=np.full(len(ids), doc + 1), texts=all_texts[ids[0] - 1:ids[-1]],
                              vectors=np.zeros((len(ids), 0), dtype=np.float32)))
    return out


def embedded(docs: list[ChunkBatch], folder: Path) -> tuple[Bm25Index, float]:
    index, started = Bm25Index(), time.perf_counter()
    for batch in docs:
        index.add(batch)
    state = index.save(folder)
    return Bm25Index.load(folder, json.loads(json.dumps(state))), time.perf_counter() - started


def postgres_load(conn: Any, docs: list[ChunkBatch]) -> float:
    """bench_pg_bm25.load's segments alone (not its rows layout or full-text table, which are not searched here)."""
    import psycopg

    from citerag.index.pg_bm25 import PgBm25Index
    from citerag.store.pg_migrate import migrate

    migrate(conn)
    index, started = PgBm25Index(conn, COLLECTION, MODEL), time.perf_counter()
    for batch in docs:
        index.add(batch)
        conn.commit()
    with psycopg.connect(conn.info.dsn, autocommit=True) as other:
        other.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def measure(backends: dict[str, Search], questions: list[str], rounds: int, documents: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    mismatches = 0
    mark = cpu_mark()
    chosen = filters(documents)
    readers = [(f"{name} as a reader", Allowed(a.documents, a.chunks, a.documents)) for name, a in chosen if a]
    for name, allowed in [*chosen, *readers]:
        note(f"filter {name}")
        per_round: dict[str, list[tuple[float, float]]] = {b: [] for b in backends}
        for r in range(rounds + 1):  # round 0 warms up and compares the backends' answers
            took: dict[str, list[float]] = {b: [] for b in backends}
            for q in questions:
                found = []
                for backend, search in backends.items():
                    t = time.perf_counter()
                    found.append(search(q, allowed))
                    took[backend].append(time.perf_counter() - t)
                if r == 0 and len(found) == 2:  # a reader's scores are its own, the same on both backends
                    (a, sa), (b, sb) = found
                    mismatches += a.tolist() != b.tolist() or sa.tolist() != sb.tolist()
            for backend in backends if r else ():
                per_round[backend].append((ms(took[backend], 50), ms(took[backend], 95)))
        for backend, values in per_round.items():
            p50, p95 = np.median(np.asarray(values), axis=0)
            rows.append({"backend": backend, "filter": name, "chunks": None if allowed is None else allowed.chunks,
                         "p50_ms": round(float(p50), 3), "p95_ms": round(float(p95), 3),
                         "rounds_p50_ms": [round(v[0], 3) for v in values]})
    return {"rows": rows, "answer_mismatches": mismatches, "others_cpus": others_since(mark)}


def report(result: dict[str, Any]) -> None:
    print(f"\nfiltered BM25, {result['chunks']:,} chunks in {result['documents']:,} documents, "
          f"{result['questions']} questions, k {K}, median of {result['rounds']} rounds' p50 and p95; "
          f"{result['cpus']} CPUs, load average at the start {result['load_average']:.2f}, {result['made']}")
    print(f"embedded built, saved and loaded in {result['embedded_build_s']:.1f} s; PostgreSQL "
          + (f"loaded in {result['postgres_load_s']:.1f} s" if result["postgres_load_s"] is not None
             else "loaded earlier (kept under --data)")
          + f"; other processes kept {result['others_cpus']:.2f} CPUs busy during the searches; "
          f"answers differing between the backends: {result['answer_mismatches']}")
    unfiltered = {x["backend"]: x for x in result["rows"] if x["filter"] == "none"}
    table(["backend", "filter (documents kept)", "allowed chunks", "p50 ms", "p95 ms", "p50 vs unfiltered"],
          [(x["backend"], x["filter"], "all" if x["chunks"] is None else x["chunks"], x["p50_ms"], x["p95_ms"],
            f"{x['p50_ms'] / unfiltered[x['backend']]['p50_ms']:.2f}x")
           for b in unfiltered for x in result["rows"] if x["backend"] == b], first=26)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=SIZE, help=f"a multiple of {PER_DOCUMENT}")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--data", type=Path, default=Path("/tmp/citerag-bench-filtered-bm25"))
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.chunks < PER_DOCUMENT or args.chunks % PER_DOCUMENT:
        raise SystemExit(f"--chunks must be a positive multiple of {PER_DOCUMENT}")
    import psycopg

    from citerag.index.pg_bm25 import PgBm25Index
    from citerag.local_postgres import LocalPostgres

    load, started = os.getloadavg()[0], time.perf_counter()
    note(f"texts of {args.chunks:,} chunks")
    docs = batches(bench_pg_bm25.texts(args.chunks))
    questions = [json.loads(line)["query"] for line in (DEV / "questions.jsonl").read_text().splitlines()]
    with tempfile.TemporaryDirectory(prefix="citerag-bench-filtered-bm25-") as tmp:
        note("embedded: add, save, load")
        local, built = embedded(docs, Path(tmp))
        note(f"embedded: {built:.1f} s")
        server = LocalPostgres(args.data / f"pg-{args.chunks}").start()
        try:
            conn = psycopg.connect(server.url("postgres"))
            loaded = None
            if conn.execute("SELECT to_regclass('bm25_segments') IS NULL").fetchone()[0]:  # type: ignore[index]
                note("postgres: load")
                loaded = postgres_load(conn, docs)
                note(f"postgres: {loaded:.1f} s")
            conn.commit()
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            remote = PgBm25Index(conn, COLLECTION, MODEL)
            if len(remote) != len(local):
                raise SystemExit(f"PostgreSQL holds {len(remote):,} chunks, not {len(local):,}: delete {args.data}")
            conn.rollback()

            def pg(q: str, allowed: Allowed | None) -> tuple[np.ndarray, np.ndarray]:
                try:
                    return remote.search(q, K, allowed)
                finally:
                    conn.rollback()

            backends: dict[str, Search] = {"Bm25Index (embedded)": lambda q, a: local.search(q, K, a),
                                           "PgBm25Index (PostgreSQL)": pg}
            result: dict[str, Any] = {
                "made": datetime.now(UTC).isoformat(timespec="seconds"), "chunks": args.chunks,
                "documents": args.chunks // PER_DOCUMENT, "chunks_per_document": PER_DOCUMENT,
                "questions": len(questions), "k": K, "rounds": args.rounds, "shares": list(SHARES),
                "cpus": os.cpu_count(), "machine": platform.platform(), "load_average": load,
                "embedded_build_s": built, "postgres_load_s": loaded,
                "server_version": str((conn.execute("SHOW server_version").fetchone() or ("?",))[0])}
            conn.rollback()
            result.update(measure(backends, questions, args.rounds, args.chunks // PER_DOCUMENT))
            conn.close()
        finally:
            server.stop()
    finish(result, started, args.json, report)


if __name__ == "__main__":
    main()
