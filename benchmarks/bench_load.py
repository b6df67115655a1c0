"""Load test: 50 concurrent users ask `citerag serve` questions for 60 s while 100 uploads are being indexed.

    .venv/bin/python benchmarks/bench_load.py [--users 50] [--seconds 60] [--out benchmarks/results/load.json]

What it runs, all on 127.0.0.1 and offline:

1. A home index in a temporary folder (the embedded SQLite store) with the dev set's 14 HTML chapters ingested by
   `citerag ingest` into its collection `default`, an admin key from `citerag keys create`, and a real
   `citerag serve` process on a free port, with API keys on.
2. Two runs of locust (headless, benchmarks/locustfile.py) against it, each bounded by time and by a number of
   requests: users ask the dev set's 80 questions and 30 out-of-domain questions through POST /ask (3 of 4
   requests) and POST /search (1 of 4), without pause between requests (a capacity test: the latencies include
   the queueing of 50 requests in flight). As soon as every user is running, the 100 documents of
   tests/reliability/corpus100.py are uploaded through POST /v1/collections/{name}/documents, ten requests of ten
   files sent at once, and the server's indexing thread works through them while it answers.
   - cold: every request a text the server has never seen (each key of every cache level is new: a miss);
   - warm: the cold run's texts again, each to the endpoint it went to then: every lookup finds its entry.
3. Per run: requests, errors (any non-2xx, timeout, connection error or malformed answer), p50/p95/p99 latency,
   throughput (requests answered / time from the first user's start to the last answer: the answers still in
   flight when the time is up count, and so does the time they take), the cache hits the answers report, whether
   ingestion finished before the run ended, and every distinct citation returned checked against its document's
   canonical text (quote == text[start:end]).
4. A cached answer, as one client sees it: after the runs, one question asked again and again over HTTP, each
   request sent when the previous answer is in (the first fills the answer cache; each timed one must be an
   answer-cache hit), on that server (traces kept, the default trace_keep) and then on the same home served again
   with CITERAG_TRACE_KEEP=0: p50/p95 and requests per second of the one client. The difference is what keeping
   an operation's trace costs a request (--cached-asks 0 skips it; --cached-only measures it alone, on a server
   that has answered nothing else: no locust runs, no uploads).

Each run uploads into a collection of its own (`upload-cold`, `upload-warm`) on the same server, so that the
indexing thread is as busy in both runs but the asked collection's store generation does not move: the retrieval
and answer caches key on that generation, and an upload into the asked collection would (rightly) make every
warm lookup a miss. Readers and a writer on one store are exercised by the short version in the test suite
(tests/reliability/test_load.py), which uploads into the collection it asks.

The figures depend on the machine (cores, what else runs): the client runs on the same cores as the server, and
the JSON records the core count and the load average before each run. Exits non-zero on any error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import reliability_page  # benchmarks/: the figures it writes into docs/reliability.md

ROOT = Path(__file__).resolve().parents[1]
DEV_SET = ROOT / "eval" / "debian-reference"
CORPUS = DEV_SET / "corpus"
LOCUSTFILE = ROOT / "benchmarks" / "locustfile.py"
BIN = Path(sys.executable).parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "load.json"
KEY_VARIABLE = "CITERAG_LOAD_KEY"
# The limit counts requests per API key, and every user of the test shares one key: left on, it would measure the
# limit (429s), not the server's capacity.
RATE_LIMIT_OFF = ["--rate-limit", "none"]  # as benchmarks/locustfile.py reads it


def dev_questions() -> list[str]:
    """The dev set's 80 questions, then its 30 out-of-domain ones (refusals are part of the load)."""
    rows = [json.loads(line) for name in ("questions.jsonl", "ood.jsonl")
            for line in (DEV_SET / name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row["query"] for row in rows]


def _tests_on_path() -> None:
    """The tests' helpers (the corpus, the wait for a server) serve the benchmark too: one copy of each."""
    if str(ROOT / "tests") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests"))


def upload_corpus(folder: Path, count: int = 100) -> dict[str, str]:
    """The reliability tests' folder of real documents (name -> text), written to `folder`."""
    _tests_on_path()  # corpus100 imports the tests' corpus_paths
    sys.path.insert(0, str(ROOT / "tests" / "reliability"))
    try:
        from corpus100 import make_corpus
    finally:
        sys.path.remove(str(ROOT / "tests" / "reliability"))
    documents: dict[str, str] = make_corpus(folder, count)
    return documents


def _env(**extra: str) -> dict[str, str]:
    # No CITERAG_* from the caller's shell: the home must be the temporary embedded one, whatever is configured.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CITERAG_", "LOCUST_"))}
    return {**env, **extra}


def _run(args: Sequence[str | Path], timeout: float) -> str:
    done = subprocess.run([str(a) for a in args], env=_env(), capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args[:3]))} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def _free_port() -> int:
    from citerag.local_postgres import free_port

    return free_port()


def _stop(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds: a process this harness started never outlives it."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)


@dataclass
class Server:
    url: str
    key: str
    home: Path
    log: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=timeout)


@contextmanager
def serve(home: Path, files: Sequence[Path], log: Path, stop_grace: float = 60.0,
          env: dict[str, str] | None = None) -> Iterator[Server]:
    """A home with `files` ingested into its collection `default`, an admin key, and `citerag serve` on a free
    loopback port (`env`: variables of the server process only); stopped (and killed if it will not stop) on the
    way out, whatever happened."""
    home.mkdir(parents=True, exist_ok=True)
    _run([BIN / "citerag", "ingest", "--index", home, *files], 1800)
    key = _run([BIN / "citerag", "keys", "create", "--index", home, "--scope", "admin"], 120).strip().splitlines()[-1]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(BIN / "citerag"), "serve", "--index", str(home), "--host", "127.0.0.1",
                                    "--port", str(port), *RATE_LIMIT_OFF],
                                   env=_env(**(env or {})), stdout=out, stderr=subprocess.STDOUT)
    try:
        _tests_on_path()
        from http_servers import wait_healthy

        wait_healthy(url, process, log, timeout=180)
        yield Server(url, key, home, log, process)
    finally:
        _stop(process, stop_grace)


class Ingestion(threading.Thread):
    """Once the users are running: uploads every document into `collection` (POSTs of `batch` files, all sent at
    once), then watches the documents until none is pending or queued, noting when. Errors are kept for the run's
    figures, never raised in the thread."""

    def __init__(self, server: Server, collection: str, documents: dict[str, str], started: Path,
                 deadline: float, batch: int = 10) -> None:
        super().__init__(name="load-ingestion", daemon=True)
        self.server, self.collection, self.documents, self.batch = server, collection, documents, batch
        self.started, self.deadline = started, deadline
        self.stop_waiting = threading.Event()
        self.errors: list[str] = []
        self.uploaded_at: float | None = None
        self.settled_at: float | None = None
        self.first_indexed_at: float | None = None
        self.statuses: dict[str, int] = {}
        self.failed: list[str] = []

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # reported with the run's figures
            self.errors.append(f"{type(exc).__name__}: {exc}"[:300])

    def _run(self) -> None:
        while not self.started.exists():
            if self.stop_waiting.wait(0.05) or time.monotonic() > self.deadline:
                self.errors.append("the users never started: nothing uploaded")
                return
        path = f"/v1/collections/{self.collection}/documents"
        names = list(self.documents)
        batches = [names[i:i + self.batch] for i in range(0, len(names), self.batch)]

        def post(batch: list[str]) -> list[int]:
            files = [("files", (name, self.documents[name].encode("utf-8"), "text/markdown")) for name in batch]
            with self.server.client() as client:
                reply = client.post(path, files=files)
            if reply.status_code != 202:
                self.errors.append(f"upload {batch[0]}...: HTTP {reply.status_code} {reply.text[:200]}")
                return []
            return [d["id"] for d in reply.json()["documents"]]

        # Batches in parallel, as a client uploading a folder would send them: one after the other, each would
        # wait its turn behind the users' requests in flight, and the folder would arrive after the run.
        with ThreadPoolExecutor(len(batches)) as pool:
            ids = [i for got in pool.map(post, batches) for i in got]
        with self.server.client() as client:
            self.uploaded_at = time.time()
            while time.monotonic() < self.deadline:
                reply = client.get(path)
                if reply.status_code != 200:
                    self.errors.append(f"document list: HTTP {reply.status_code} {reply.text[:200]}")
                else:
                    mine = [d for d in reply.json()["documents"] if d["id"] in ids]
                    if self.first_indexed_at is None and any(d["status"] == "indexed" for d in mine):
                        self.first_indexed_at = time.time()
                    if len(mine) == len(ids) and all(d["status"] != "pending" and d["job"] is None for d in mine):
                        self.settled_at = time.time()
                        self.statuses = {s: sum(d["status"] == s for d in mine) for s in ("indexed", "failed")}
                        self.failed = [d["name"] for d in mine if d["status"] == "failed"]
                        return
                if self.stop_waiting.wait(0.5):
                    return


class CpuSeconds:
    """CPU seconds spent on the machine during a run, and by whom: the server, the harness's children (locust, once
    it has been waited for), the harness itself, and everything else. The load average cannot tell: the server's
    own busy threads raise it. Linux only (/proc); None elsewhere."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid
        self.start = self._sample()

    def _sample(self) -> tuple[float, float, float, float] | None:
        try:
            tick = os.sysconf("SC_CLK_TCK")
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
            busy = (sum(fields) - fields[3] - fields[4]) / tick  # all but idle and iowait
            stat = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
            server = (int(stat[11]) + int(stat[12])) / tick  # utime, stime
        except (OSError, ValueError, IndexError):
            return None
        children, me = resource.getrusage(resource.RUSAGE_CHILDREN), resource.getrusage(resource.RUSAGE_SELF)
        return busy, server, children.ru_utime + children.ru_stime, me.ru_utime + me.ru_stime

    def spent(self) -> dict[str, float] | None:
        end = self._sample()
        if self.start is None or end is None:
            return None
        busy, server, locust, harness = (round(b - a, 1) for a, b in zip(self.start, end, strict=True))
        return {"machine": busy, "server": server, "locust": locust, "harness": harness,
                "other": round(busy - server - locust - harness, 1)}


def _percentiles(ms: list[float]) -> dict[str, float | None]:
    if not ms:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None, "max_ms": None}
    values = np.array(ms)
    out: dict[str, float | None] = {f"p{q}_ms": round(float(np.percentile(values, q)), 1) for q in (50, 95, 99)}
    return out | {"max_ms": round(float(values.max()), 1)}


def cache_counts(server: Server) -> dict[str, dict[str, float]]:
    """citerag_cache_requests_total by level and result, from /metrics (searches report no cache in their body)."""
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {server.key}"}, timeout=30).text
    counts: dict[str, dict[str, float]] = {}
    for level, result, value in re.findall(
            r'^citerag_cache_requests_total\{level="(\w+)",result="(\w+)"\} ([0-9.e+]+)$', text, re.M):
        counts.setdefault(level, {})[result] = float(value)
    return counts


def check_citations(server: Server, collection: str, citations: dict[str, str]) -> dict[str, Any]:
    """Every distinct citation returned ("document:start:end" -> quote) against its document's canonical text,
    as GET .../documents/{id}/text serves it: quote == text[start:end], code points."""
    texts: dict[int, str] = {}
    invalid: list[str] = []
    with server.client() as client:
        for where, quote in citations.items():
            document, start, end = (int(part) for part in where.split(":"))
            if document not in texts:
                reply = client.get(f"/v1/collections/{collection}/documents/{document}/text")
                reply.raise_for_status()
                texts[document] = reply.text
            if texts[document][start:end] != quote:
                invalid.append(where)
    return {"checked": len(citations), "documents": len(texts), "invalid": invalid}


def run_load(server: Server, work: Path, *, label: str, collection: str = "default", users: int = 50,
             seconds: float = 60, max_requests: int = 30000, question_count: int = 0, think: float = 0.0,
             request_timeout: float = 30.0, uploads: dict[str, str] | None = None,
             upload_collection: str | None = None, settle_timeout: float = 600.0) -> dict[str, Any]:
    """One locust run (a subprocess, headless) of `users` users for `seconds`, at most `max_requests` requests,
    with `uploads` posted into `upload_collection` (created if it is not the asked one) once the users run."""
    work.mkdir(parents=True, exist_ok=True)
    questions, record, started = work / "questions.json", work / f"{label}.record.json", work / f"{label}.started"
    questions.write_text(json.dumps(dev_questions()), encoding="utf-8")
    record.unlink(missing_ok=True)
    started.unlink(missing_ok=True)
    upload_collection = upload_collection or collection
    if uploads and upload_collection != collection:
        with server.client() as client:
            client.post("/v1/collections", json={"name": upload_collection}).raise_for_status()
    cache_before = cache_counts(server)
    load_before = os.getloadavg()
    cpu = CpuSeconds(server.process.pid)
    stop_timeout = request_timeout + 5  # in-flight requests finish (and count) when the time is up
    bound = seconds + stop_timeout + 120  # locust's own start included
    ingestion = (Ingestion(server, upload_collection, uploads, started, time.monotonic() + bound + settle_timeout)
                 if uploads else None)
    if ingestion:
        ingestion.start()
    command = [str(BIN / "locust"), "-f", str(LOCUSTFILE), "--headless", "-u", str(users), "-r", str(users),
               "-t", f"{seconds:g}s", "-H", server.url, "--stop-timeout", f"{stop_timeout:g}", "--only-summary",
               "--loglevel", "WARNING", "--exit-code-on-error", "0",
               "--questions", str(questions), "--collection", collection, "--question-count", str(question_count),
               "--max-requests", str(max_requests), "--request-timeout", f"{request_timeout:g}",
               "--think", f"{think:g}", "--record", str(record), "--started", str(started)]
    log = work / f"{label}.locust.log"
    try:
        with open(log, "wb") as out:
            locust = subprocess.Popen(command, env=_env(**{KEY_VARIABLE: server.key}), stdout=out,
                                      stderr=subprocess.STDOUT)
        try:
            locust.wait(bound)
        finally:
            _stop(locust, 30)  # only does something when it overran its bound
        load_after = os.getloadavg()
        cpu_spent = cpu.spent()  # was anything else running on these cores? ("other")
        if locust.returncode != 0 or not record.exists():
            raise RuntimeError(f"locust failed ({locust.returncode}): see {log}")
        if ingestion:
            ingestion.join(settle_timeout)
    finally:
        if ingestion:
            ingestion.stop_waiting.set()
            ingestion.join(30)
    data = json.loads(record.read_text(encoding="utf-8"))
    rows = data["requests"]
    started_at = data["started_at"]
    ended_at = max((sent + ms / 1000 for _, sent, ms, _ in rows), default=started_at)
    errors = [error for _, _, _, error in rows if error] + data["user_errors"]
    kinds: dict[str, int] = {}
    for error in errors:
        kinds[error[:120]] = kinds.get(error[:120], 0) + 1
    cache_after = cache_counts(server)
    result: dict[str, Any] = {
        "label": label, "users": data.get("users", users), "seconds": seconds, "max_requests": max_requests,
        "think_s": think, "request_timeout_s": request_timeout,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after], "cpu_seconds": cpu_spent,
        "requests": len(rows), "errors": len(errors), "error_kinds": kinds,
        "latency": _percentiles([ms for _, _, ms, _ in rows]),
        "throughput_rps": round(len(rows) / max(ended_at - started_at, 1e-9), 2),
        "measured_s": round(ended_at - started_at, 2), "sent": data.get("sent", 0),
        "locust_cpu_warning": bool(data.get("cpu_warning")),
        "by_endpoint": {name: {"requests": sum(r[0] == name for r in rows),
                               "errors": sum(r[0] == name and r[3] is not None for r in rows),
                               **_percentiles([r[2] for r in rows if r[0] == name])}
                        for name in sorted({r[0] for r in rows})},
        # From the answers (asks only): [hits, lookups] per level; an answer hit ends the lookup there.
        "ask_cache": data["cache"],
        "cache_lookups": {level: {result: cache_after.get(level, {}).get(result, 0)
                                  - cache_before.get(level, {}).get(result, 0) for result in ("hit", "miss")}
                          for level in sorted(set(cache_after) | set(cache_before))},
        "citations": check_citations(server, collection, data["citations"]),
    }
    if ingestion:
        def since(t: float | None) -> float | None:
            return None if t is None else round(t - started_at, 2)

        result["ingestion"] = {
            "collection": upload_collection, "documents": len(uploads or {}), "errors": ingestion.errors,
            "uploaded_s": since(ingestion.uploaded_at), "first_indexed_s": since(ingestion.first_indexed_at),
            "settled_s": since(ingestion.settled_at), "statuses": ingestion.statuses, "failed": ingestion.failed,
            "finished_during_run": ingestion.settled_at is not None and ingestion.settled_at <= ended_at,
            "indexed_during_run": ingestion.first_indexed_at is not None and ingestion.first_indexed_at <= ended_at,
        }
    return result


def cached_answer(server: Server, collection: str = "default", asks: int = 300) -> dict[str, Any]:
    """One client asking the dev set's first question `asks` times, each request sent when the previous answer is
    in, after one ask that fills the answer cache: the latency of an answer-cache hit over HTTP (loopback), what
    the server does around it included (keeping its trace, unless the collection keeps none)."""
    question = dev_questions()[0]
    path = f"/v1/collections/{collection}/ask"
    ms: list[float] = []
    misses = 0
    with server.client() as client:
        client.post(path, json={"question": question}).raise_for_status()
        started = time.perf_counter()
        for _ in range(asks):
            sent = time.perf_counter()
            reply = client.post(path, json={"question": question})
            ms.append((time.perf_counter() - sent) * 1000)
            reply.raise_for_status()
            misses += not (reply.json().get("cache") or {}).get("answer")
        elapsed = time.perf_counter() - started
    return {"asks": asks, "answer_cache_misses": misses, **_percentiles(ms),
            "one_client_rps": round(asks / max(elapsed, 1e-9), 1)}


def clean(run: dict[str, Any]) -> list[str]:
    """What makes a run fail: errors, invalid citations, upload or indexing failures."""
    problems = []
    if run["errors"]:
        problems.append(f"{run['errors']} errors: {run['error_kinds']}")
    if run["citations"]["invalid"]:
        problems.append(f"citations whose quote is not the text's [start:end]: {run['citations']['invalid'][:5]}")
    ingestion = run.get("ingestion") or {}
    if ingestion.get("errors") or ingestion.get("failed"):
        problems.append(f"ingestion: {ingestion.get('errors')} failed: {ingestion.get('failed')}")
    return problems


def table(runs: Sequence[dict[str, Any]]) -> str:
    head = (f"{'run':<6} {'users':>5} {'requests':>8} {'errors':>6} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} "
            f"{'req/s':>7}  ingestion (100 docs) finished during the run")
    lines = [head]
    for r in runs:
        ingestion = r.get("ingestion") or {}
        settled = ingestion.get("settled_s")
        finished = ("yes" if ingestion.get("finished_during_run") else "no") + (
            f" (all settled at {settled} s)" if settled is not None else " (not settled)")
        lat = r["latency"]
        lines.append(f"{r['label']:<6} {r['users']:>5} {r['requests']:>8} {r['errors']:>6} {lat['p50_ms']:>8} "
                     f"{lat['p95_ms']:>8} {lat['p99_ms']:>8} {r['throughput_rps']:>7}  {finished}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--max-requests", type=int, default=30000, help="upper bound on requests per run")
    parser.add_argument("--think", type=float, default=0.0, help="each user waits uniform(0, THINK) s between")
    parser.add_argument("--request-timeout", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, records, the index)")
    parser.add_argument("--cached-asks", type=int, default=300,
                        help="timed asks of one cached answer, traces kept and trace_keep 0 (0: not measured)")
    parser.add_argument("--cached-only", action="store_true", help="only the cached answer: no locust runs")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="citerag-bench-load-"))
    files = sorted(CORPUS.glob("*.html"))
    uploads = upload_corpus(work / "uploads")
    print(f"work in {work}; ingesting {len(files)} chapters, then serving", flush=True)
    runs: list[dict[str, Any]] = []
    cached: dict[str, Any] = {}
    finished = False
    try:
        with serve(work / "home", files, work / "serve.log") as server:
            for label, count in () if args.cached_only else (("cold", 0), ("warm", None)):
                # warm: the cold run's texts (every text it sent), so each request finds the entries it wrote.
                issued = runs[0]["sent"] if count is None else count
                run = run_load(server, work, label=label, users=args.users, seconds=args.seconds,
                               max_requests=args.max_requests, question_count=issued, think=args.think,
                               request_timeout=args.request_timeout, uploads=uploads,
                               upload_collection=f"upload-{label}")
                runs.append(run)
                print(f"{label}: {run['requests']} requests, {run['errors']} errors, {run['latency']}, "
                      f"{run['throughput_rps']} req/s, ingestion {run.get('ingestion')}", flush=True)
            if args.cached_asks:
                cached["traces_kept"] = cached_answer(server, asks=args.cached_asks)
        if args.cached_asks:  # the same home served again, keeping no traces
            untraced = {"CITERAG_TRACE_KEEP": "0"}
            with serve(work / "home", files, work / "serve-trace-keep-0.log", env=untraced) as server:
                cached["trace_keep_0"] = cached_answer(server, asks=args.cached_asks)
            print(f"cached answer: {cached}", flush=True)
        finished = True
    finally:
        if finished and not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"logs and records kept in {work}", file=sys.stderr)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "command": " ".join(["benchmarks/bench_load.py", *sys.argv[1:]]),
        "users": args.users, "seconds": args.seconds, "max_requests": args.max_requests, "think_s": args.think,
        "corpus": {"asked": "default", "chapters": len(files), "questions": len(dev_questions()),
                   "uploaded": len(uploads)},
        "runs": {r["label"]: r for r in runs},
        "cached_answer": cached,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table(runs))
    for condition, figures in cached.items():
        print(f"cached answer, {condition.replace('_', ' ')}: p50 {figures['p50_ms']} ms, p95 {figures['p95_ms']} ms, "
              f"{figures['one_client_rps']} req/s for one client ({figures['answer_cache_misses']} misses)")
    print(f"written {args.out}")
    if args.out == DEFAULT_OUT and args.users >= 50 and args.seconds >= 60 and runs:  # the full run only
        reliability_page.fill(result)
        print(f"written {reliability_page.PAGE}")
    problems = [f"{r['label']}: {p}" for r in runs for p in clean(r)]
    problems += [f"cached answer, {c}: {f['answer_cache_misses']} answer-cache misses" for c, f in cached.items()
                 if f["answer_cache_misses"]]
    if problems:
        sys.exit("\n".join(problems))


if __name__ == "__main__":
    main()
