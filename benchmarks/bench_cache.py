"""Caches: `ask` latency cold and with each cache level hit (embedding, retrieval, answer), memory and Redis.

    .venv/bin/python benchmarks/bench_cache.py                  # 14 chapters, 80 dev questions (about 2 minutes)
    .venv/bin/python benchmarks/bench_cache.py --quick          # 3 chapters, 20 questions (about 40 s)
    .venv/bin/python benchmarks/bench_cache.py --out cache.json # also every latency, as JSON

The dev corpus (eval/debian-reference/corpus/*.html; --quick: ch02, ch03 and ch04) is ingested once, with the
default settings and the real default encoder, into a temporary index (deleted at the end). Then, per backend
(memory, then Redis when `redis-server` is on PATH: a private server on a free local port, no persistence,
stopped at the end; without one the Redis rows are skipped, and a line says so), the index is opened by three
applications, each with its own empty cache (memory: its own process cache; Redis: its own database number) and
its own cache TTLs (a TTL of 0 turns a level off):

    all levels on    first ask   -> cold: every level misses (and the three levels are written)
                     second ask  -> answer hit: the answer is replayed (nothing embedded, retrieved or generated)
    query only       second ask  -> embedding hit: the question's vector from the cache; retrieval and generation run
    query+retrieval  second ask  -> retrieval hit: vector and ranked hits from the cache; the generator runs

Every question is asked twice by each application, interleaved (question 1: all, all, query, query, ..., then
question 2), after one warm-up question per application (encoder, search indexes and generator loaded, both
paths run once). Each timed ask is `Citerag.ask` wall time; each is checked through `Answer.cache` to have hit
exactly the intended levels (and each first ask to have hit none), and each cached answer to equal the one
computed (text and refusal); any mismatch stops the run. Generator: the default, extractive one. p50 and p95
are over the questions; speed-up is cold p50 / the row's p50, within the backend. Columns query, retrieval and
answer: hits/misses of that level in `Citerag.cache_counts` over the row's timed asks ("off": level off; 0/0: not
consulted, as after an answer hit). Last column: the p50 of each stage in `Answer.timings`, in ms (–: skipped).

Measured 2026-11-30 on commit 0afc08a, full run (115 s in all, of which the ingest 25 s), 2 CPUs otherwise
idle, as printed (the first line wrapped):

    citerag cache benchmark: 14 chapters, 1,343 chunks (ingest 25.1 s); 80 dev questions (0 refused by the gate),
            each asked twice per application; extractive generator; trace_keep 10000 (default settings otherwise);
            commit 0afc08a; redis-server 7.0.15; 2 CPUs, other processes kept memory 0.01, redis 0.00 CPUs busy
            meanwhile; 115 s in all

    | backend | condition | hit | p50 ms | p95 ms | speed-up | query | retrieval | answer | embed/retrieve/generate |
    |---|---|---|---:|---:|---:|---|---|---|---|
    | memory | cold | none | 116.51 | 160.52 | 1.0× | 0/80 | 0/80 | 0/80 | 6.8 / 0.9 / 104.5 |
    | memory | embedding hit | query | 106.54 | 159.46 | 1.1× | 80/0 | off | off | 0.1 / 0.7 / 101.5 |
    | memory | retrieval hit | query, retrieval | 84.56 | 118.11 | 1.4× | 80/0 | 80/0 | off | 0.1 / – / 80.4 |
    | memory | answer hit | answer | 2.46 | 3.39 | 47.4× | 0/0 | 0/0 | 80/0 | – / – / – |
    | redis | cold | none | 115.07 | 154.36 | 1.0× | 0/80 | 0/80 | 0/80 | 7.0 / 0.8 / 101.2 |
    | redis | embedding hit | query | 107.28 | 145.53 | 1.1× | 80/0 | off | off | 0.4 / 0.7 / 101.8 |
    | redis | retrieval hit | query, retrieval | 84.00 | 124.72 | 1.4× | 80/0 | 80/0 | off | 0.4 / – / 79.5 |
    | redis | answer hit | answer | 2.55 | 3.35 | 45.1× | 0/0 | 0/0 | 80/0 | – / – / – |

Reading it: the extractive generator (an ONNX embedding of the question and every sentence of the cited sources)
is 100 of a cold ask's 115 ms, so the embedding cache saves its 7 ms and only the answer cache changes much. The
retrieval hit's further 20 ms are not the 0.8 ms retrieval: OpenBLAS's worker threads, left busy after a
computed dense scan, slow the ONNX run that follows (the difference goes with one OpenBLAS thread).
`OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_cache.py`, right after, same commit and idle CPUs:
cold p50 95.5 / 94.1 ms (memory / Redis), embedding hit 87.3 / 87.7, retrieval hit 86.0 / 86.1, answer hit 2.44
/ 2.65; generate 81-83 ms in every condition. An answer hit is 1.0-1.1 ms with trace_keep 0 (a side check);
writing its trace is the rest.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from citerag.app.home import Citerag
from citerag.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "eval" / "debian-reference"
QUICK_CHAPTERS = ("ch02.en.html", "ch03.en.html", "ch04.en.html")  # 22 of the 80 questions are about these
QUICK_QUESTIONS = 20
LEVELS = ("query", "retrieval", "answer")
STAGES = ("embed", "retrieve", "generate")  # Answer.timings keys
TTL = 3600.0
WARM_UP = "Which command lists the packages installed on a Debian system?"  # not one of the dev questions

_T0 = time.perf_counter()


def note(message: str) -> None:
    """Progress, on stderr."""
    print(f"[{time.perf_counter() - _T0:6.1f} s] {message}", file=sys.stderr, flush=True)


def cpu_mark() -> tuple[float, float, float]:
    """(wall, CPU seconds busy on the whole machine, CPU seconds of this process)."""
    import psutil

    t = psutil.cpu_times()
    busy = t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)
    own = psutil.Process().cpu_times()
    return time.perf_counter(), busy, own.user + own.system


def others_since(mark: tuple[float, float, float]) -> float:
    """CPUs other processes kept busy on average since `mark` (Redis included): the noise."""
    now = cpu_mark()
    return max(0.0, (now[1] - mark[1]) - (now[2] - mark[2])) / max(now[0] - mark[0], 1e-9)


# ------------------------------------------------------------------------------------------------ conditions


@dataclass(frozen=True)
class Condition:
    name: str
    app: str  # which application (TTL set) asks
    ask: int  # 1: the first ask of a question in that application, 2: the second
    hits: frozenset[str]  # the levels the timed ask must hit, exactly


APPS = {  # application -> the TTL of each level (0 = off)
    "all": {"query": TTL, "retrieval": TTL, "answer": TTL},
    "query": {"query": TTL, "retrieval": 0.0, "answer": 0.0},
    "query+retrieval": {"query": TTL, "retrieval": TTL, "answer": 0.0},
}
CONDITIONS = (
    Condition("cold", "all", 1, frozenset()),
    Condition("embedding hit", "query", 2, frozenset({"query"})),
    Condition("retrieval hit", "query+retrieval", 2, frozenset({"query", "retrieval"})),
    Condition("answer hit", "all", 2, frozenset({"answer"})),
)


def expected(app: str, ask: int) -> frozenset[str]:
    """The levels an ask must hit: none the first time, the timed condition's the second."""
    if ask == 1:
        return frozenset()
    return next(c.hits for c in CONDITIONS if c.app == app and c.ask == 2)


# ------------------------------------------------------------------------------------------------ the index


def ingest(index: Path, chapters: list[Path]) -> dict[str, Any]:
    note(f"ingesting {len(chapters)} chapters into {index}")
    started = time.perf_counter()
    with Citerag.open(Settings(index_dir=index), create=True) as app:
        report = app.ingest(chapters)
    if report.failed or len(report.indexed) != len(chapters):
        raise SystemExit(f"ingest failed: {report.as_json()}")
    return {"chapters": len(chapters), "chunks": report.chunks, "wall_s": time.perf_counter() - started}


# ------------------------------------------------------------------------------------------------ Redis


def source_state() -> str:
    """The commit measured, and whether src/ differed from it."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "src"], capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown"
    return f"commit {head}{' + uncommitted changes in src/' if dirty else ''}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server(executable: str) -> Iterator[tuple[int, str]]:
    """A private redis-server on a free local port, no persistence; (port, version). Stopped on exit."""
    import redis

    port = free_port()
    proc = subprocess.Popen([executable, "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                    raise SystemExit(f"redis-server on port {port} did not start: {err.strip()}") from None
                time.sleep(0.05)
        version = str(client.info("server")["redis_version"])
        client.close()
        yield port, version
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------------ measuring


def hit_set(cache: dict[str, bool]) -> frozenset[str]:
    return frozenset(level for level in LEVELS if cache.get(level))


def measure(backend: str, urls: dict[str, str], index: Path, questions: list[str]) -> dict[str, Any]:
    """Each question asked twice by each application, interleaved; the four conditions' latencies and counts."""
    apps: dict[str, Citerag] = {}
    try:
        for name, ttls in APPS.items():
            settings = Settings(index_dir=index, cache_url=urls[name], cache_query_ttl=ttls["query"],
                                cache_retrieval_ttl=ttls["retrieval"], cache_answer_ttl=ttls["answer"])
            apps[name] = app = Citerag.open(settings)
            for ask in (1, 2):  # loads the encoder, the search indexes and the generator; runs both paths once
                got = hit_set(app.ask(WARM_UP).cache)
                if got != expected(name, ask):
                    raise SystemExit(f"{backend}, {name}, warm-up ask {ask}: hit {sorted(got)}, expected "
                                     f"{sorted(expected(name, ask))}: the cache is not empty or not working")
        times: dict[tuple[str, int], list[float]] = {(name, ask): [] for name in APPS for ask in (1, 2)}
        stages: dict[tuple[str, int], dict[str, list[float]]] = {key: {s: [] for s in STAGES} for key in times}
        counts: dict[tuple[str, int], Counter[tuple[str, str]]] = {key: Counter() for key in times}
        refused = 0
        gc.collect()
        mark = cpu_mark()
        for i, question in enumerate(questions):
            computed = None
            for name, app in apps.items():
                for ask in (1, 2):
                    before = Counter(app.cache_counts)
                    started = time.perf_counter()
                    answer = app.ask(question)
                    elapsed = time.perf_counter() - started
                    times[(name, ask)].append(elapsed)
                    counts[(name, ask)].update(Counter(app.cache_counts) - before)
                    for stage in STAGES:
                        if stage in answer.timings:
                            stages[(name, ask)][stage].append(answer.timings[stage])
                    got, want = hit_set(answer.cache), expected(name, ask)
                    if got != want:
                        raise SystemExit(f"{backend}, {name}, question {i + 1} ask {ask}: hit {sorted(got)}, "
                                         f"expected exactly {sorted(want)} ({question!r})")
                    if computed is None:
                        computed = (answer.answer, answer.refused)
                        refused += answer.refused
                    elif (answer.answer, answer.refused) != computed:
                        raise SystemExit(f"{backend}, {name}, question {i + 1} ask {ask}: a different answer than "
                                         f"the cold one ({question!r})")
        others = others_since(mark)
    finally:
        for app in apps.values():
            app.close()
    rows: dict[str, Any] = {}
    for c in CONDITIONS:
        values = np.asarray(times[(c.app, c.ask)]) * 1e3
        rows[c.name] = {"application": c.app, "ask": c.ask, "hits": sorted(c.hits),
                        "p50_ms": float(np.percentile(values, 50)), "p95_ms": float(np.percentile(values, 95)),
                        "mean_ms": float(values.mean()), "times_ms": [round(float(v), 4) for v in values],
                        "stages_p50_ms": {s: float(np.percentile(v, 50)) * 1e3 if v else None
                                          for s, v in stages[(c.app, c.ask)].items()},
                        "cache_counts": {level: None if APPS[c.app][level] <= 0 else
                                         {"hit": counts[(c.app, c.ask)][(level, "hit")],
                                          "miss": counts[(c.app, c.ask)][(level, "miss")]} for level in LEVELS}}
    cold = rows["cold"]["p50_ms"]
    for row in rows.values():
        row["speedup"] = cold / row["p50_ms"]
    return {"backend": backend, "urls": urls, "refused": refused, "other_cpus_busy": others, "conditions": rows}


# ------------------------------------------------------------------------------------------------ report


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| backend | condition | hit | p50 ms | p95 ms | speed-up | query | retrieval | answer | "
             "embed/retrieve/generate |",
             "|---|---|---|---:|---:|---:|---|---|---|---|"]
    for r in results:
        for name, row in r["conditions"].items():
            cells = []
            for level in LEVELS:
                c = row["cache_counts"][level]
                cells.append("off" if c is None else f"{c['hit']}/{c['miss']}")
            split = " / ".join("–" if v is None else f"{v:.1f}" for v in row["stages_p50_ms"].values())
            lines.append(f"| {r['backend']} | {name} | {', '.join(row['hits']) or 'none'} | {row['p50_ms']:.2f} | "
                         f"{row['p95_ms']:.2f} | {row['speedup']:.1f}× | " + " | ".join(cells) + f" | {split} |")
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{len(QUICK_CHAPTERS)} chapters and {QUICK_QUESTIONS} of their questions")
    parser.add_argument("--out", type=Path, help="also write the results (every latency) as JSON here")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    records = [json.loads(line) for line in (DEV / "questions.jsonl").read_text().splitlines() if line.strip()]
    chapters = sorted((DEV / "corpus").glob("*.html"))
    if args.quick:
        chapters = [p for p in chapters if p.name in QUICK_CHAPTERS]
        records = [r for r in records if r["source"] in QUICK_CHAPTERS][:QUICK_QUESTIONS]
    questions = [r["query"] for r in records]
    if len(set(questions)) != len(questions) or WARM_UP in questions:
        raise SystemExit("the questions must be distinct from one another and from the warm-up question")

    tmp = Path(tempfile.mkdtemp(prefix="citerag-bench-cache-"))
    results: list[dict[str, Any]] = []
    skipped: str | None = None
    try:
        corpus = ingest(tmp / "index", chapters)
        note("memory")
        results.append(measure("memory", dict.fromkeys(APPS, "memory"), tmp / "index", questions))
        executable = shutil.which("redis-server")
        redis_version = None
        if executable is None:
            skipped = "redis-server is not on PATH: the Redis rows are skipped (apt-get install redis-server)"
            print(skipped, flush=True)
        else:
            with redis_server(executable) as (port, redis_version):
                note(f"redis {redis_version} on port {port}")
                urls = {name: f"redis://127.0.0.1:{port}/{db}" for db, name in enumerate(APPS)}
                results.append(measure("redis", urls, tmp / "index", questions))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    total = time.perf_counter() - _T0
    source = source_state()
    trace_keep = Settings().trace_keep
    noise = ", ".join(f"{r['backend']} {r['other_cpus_busy']:.2f}" for r in results)
    print(f"citerag cache benchmark{' (--quick)' if args.quick else ''}: {corpus['chapters']} chapters, "
          f"{corpus['chunks']:,} chunks (ingest {corpus['wall_s']:.1f} s); {len(questions)} dev questions "
          f"({results[0]['refused']} refused by the gate), each asked twice per application; extractive generator; "
          f"trace_keep {trace_keep} (default settings otherwise); {source}; "
          f"{'redis-server ' + redis_version if redis_version else 'no Redis'}; {os.cpu_count()} CPUs, other "
          f"processes kept {noise} CPUs busy meanwhile; {total:.0f} s in all")
    print()
    print(table(results))
    if args.out:
        data = {"measured": datetime.now(UTC).isoformat(timespec="seconds"), "quick": args.quick,
                "corpus": corpus, "questions": len(questions), "source": source, "redis_version": redis_version,
                "redis_skipped": skipped, "cpus": os.cpu_count(), "total_s": total, "results": results}
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        note(f"wrote {args.out}")


if __name__ == "__main__":
    main()
