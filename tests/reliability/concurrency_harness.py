"""The clients and processes of tests/reliability/test_concurrency.py: readers that check every response whole,
the writers that run beside them, and what they all saw."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from citerag.extract import extractor_for

CLI = [sys.executable, "-m", "citerag.cli"]
COLLECTION = "/v1/collections/default"
PHASES = ("ingest", "replace", "reindex")
# Anything in a process's output that means a user could have seen a failure.
BAD_OUTPUT = re.compile(r"locked|traceback|internal error|exception", re.I)
CLI_READS_PER_PHASE = 2  # one search, one ask: each process spends seconds of CPU loading its model
# Pauses that leave the two cores' CPU to the writers (readers that never pause starve them, and the run then takes
# minutes): a reader's think time, and the time between one replacement being served and the next PUT.
READER_PAUSE_S = 0.1
REPLACE_PAUSE_S = 3.0


def canonical(name: str, raw: str) -> str:
    """The text the indexer stores for these bytes: citations index into it."""
    extractor = extractor_for(Path(name))
    assert extractor is not None
    return extractor.extract(raw.encode(), Path(name)).text


class Versions:
    """Every version of every document the test ever wrote, registered before it is written, so that a reader can
    tell a whole version from a torn one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._texts: dict[str, list[str]] = {}
        self.latest: dict[str, str] = {}

    def add(self, name: str, raw: str) -> None:
        text = canonical(name, raw)
        with self._lock:
            self._texts.setdefault(name, []).append(text)
            self.latest[name] = text

    def problems(self, citations: list[dict[str, Any]]) -> list[str]:
        """What is not whole: a quote found in no version, one document's quotes from two versions, or two of its
        chunks that overlap (one version's chunks never do under strategies E and C: two chunkings were mixed)."""
        by_name: dict[str, list[dict[str, Any]]] = {}
        for c in citations:
            by_name.setdefault(c["document_name"], []).append(c)
        with self._lock:
            known = {name: list(self._texts.get(name, [])) for name in by_name}
        out = []
        for name, cited in by_name.items():
            spans = sorted((c["start"], c["end"]) for c in cited)
            if not any(all(text[c["start"]:c["end"]] == c["quote"] for c in cited) for text in known[name]):
                out.append(f"{name} {spans}: no single version holds these quotes ({len(known[name])} known)")
            if any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
                out.append(f"{name} {spans}: overlapping chunks of one document")
        return out


class Phase:
    """The phase now running, read by every client when it records a response."""

    def __init__(self) -> None:
        self.name = "setup"


@dataclass
class Tally:
    """What every client saw, per phase; errors are described in one line each."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)  # the first 50, described
    failures: int = 0  # all of them
    hits: list[tuple[int, float]] = field(default_factory=list)  # (document id, when its response had ended)
    pending_seen: dict[int, float] = field(default_factory=dict)  # document id -> latest read start seeing pending

    def ok(self, phase: str, kind: str, document_ids: list[int], ended: float) -> None:
        with self.lock:
            self.answered[(phase, kind)] += 1
            self.hits.extend((i, ended) for i in document_ids)

    def error(self, what: str) -> None:
        with self.lock:
            self.failures += 1
            if len(self.errors) < 50:  # a server that died would otherwise fill the report with one error
                self.errors.append(what[:500])

    def count(self, phase: str, prefix: str = "") -> int:
        with self.lock:
            return sum(n for (ph, kind), n in self.answered.items() if ph == phase and kind.startswith(prefix))

    def per_kind(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (_, kind), n in self.answered.items():
            out[kind] += n
        return dict(out)

    def hits_while_pending(self) -> list[tuple[int, float]]:
        """Hits on a document that a read beginning after the hit's response had ended still saw pending: the
        search saw it indexed before it was (a document's status only goes from pending to indexed)."""
        return [(i, t) for i, t in self.hits if t < self.pending_seen.get(i, float("-inf"))]


def revised(text: str, marker: str, number: int) -> str:
    """A new version: a marker paragraph appended, and a note before the text whose length changes from one
    version to the next, so that every offset moves and chunks of two versions can never pass for one."""
    note = f"{marker}." + " The earlier wording is kept below." * (number % 7 + 1)
    return f"{note}\n\n{text}\nA marker paragraph appended by the replacement: {marker}.\n"


def queries(texts: dict[str, str]) -> list[str]:
    """Each document's own section titles as queries, so hits spread over every document, fresh ones included."""
    out = []
    for text in texts.values():
        for line in text.splitlines():
            title = re.sub(r"^#+\s*[\d.]*\s*", "", line) if line.startswith("#") else ""
            if len(title) > 8:
                out.append(title)
    return out + ["marker paragraph appended by the replacement", "replaced through the API"]


def check_response(body: dict[str, Any], citations: list[dict[str, Any]], versions: Versions) -> list[str]:
    problems = versions.problems(citations)
    if "error" in body:
        problems.append(f"error in a 2xx body: {body['error']}")
    check = body.get("check") or {}
    if check.get("invalid_markers"):
        problems.append(f"answer cites what it was not given: {check['invalid_markers']}")
    return problems


def http_reader(url: str, seed: int, stop: threading.Event, phase: Phase, tally: Tally, versions: Versions,
                asked: list[str]) -> None:
    """Search (all three modes) and ask, at random, until stopped; each response checked whole."""
    rnd = random.Random(seed)
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.wait(READER_PAUSE_S):
            query, now = rnd.choice(asked), phase.name
            kind = rnd.choice(["search", "ask"])
            try:
                if kind == "search":
                    r = client.post(f"{COLLECTION}/search",
                                    json={"query": query, "k": 8, "mode": rnd.choice(["dense", "bm25", "hybrid"])})
                else:
                    # A loose threshold, so that most questions are answered with citations rather than refused.
                    r = client.post(f"{COLLECTION}/ask", json={"question": f"What is said about {query}?",
                                                                "threshold": 1.0})
            except httpx.HTTPError as exc:
                tally.error(f"http {kind} {query!r}: {type(exc).__name__}: {exc}")
                continue
            ended = time.monotonic()
            if not r.is_success:
                tally.error(f"http {kind} {query!r}: {r.status_code} {r.text[:300]}")
                continue
            body = r.json()
            citations = body["results"] if kind == "search" else body["citations"]
            problems = check_response(body, citations, versions)
            if problems:
                tally.error(f"http {kind} {query!r}: {'; '.join(problems)}")
                continue
            tally.ok(now, f"http {kind}", [c["document_id"] for c in citations], ended)


def cli_reader(env: dict[str, str], home: Path, stop: threading.Event, phase: Phase, tally: Tally,
               versions: Versions, asked: list[str]) -> None:
    """`citerag search` and `citerag ask` processes, each opening the index on its own as a user at a terminal
    does, while the writers run: CLI_READS_PER_PHASE of them per phase."""
    rnd = random.Random(7)
    while not stop.wait(0.2):
        now = phase.name
        done_here = tally.count(now, "cli")
        if now not in PHASES or done_here >= CLI_READS_PER_PHASE:
            continue
        kind, query = ("search", "ask")[done_here % 2], rnd.choice(asked)
        argv = [*CLI, kind, query if kind == "search" else f"What is said about {query}?", "--index", str(home),
                "--json"] + (["--mode", "hybrid"] if kind == "search" else ["--threshold", "1.0"])
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            tally.error(f"cli {kind} {query!r}: timed out")
            continue
        if done.returncode != 0 or BAD_OUTPUT.search(done.stderr):
            tally.error(f"cli {kind} {query!r}: exit {done.returncode}: {done.stderr[-400:]}")
            continue
        body = json.loads(done.stdout)
        citations = body if kind == "search" else body["citations"]
        problems = check_response({} if kind == "search" else body, citations, versions)
        if problems:
            tally.error(f"cli {kind} {query!r}: {'; '.join(problems)}")
            continue
        tally.ok(now, f"cli {kind}", [], time.monotonic())


def api_replacer(url: str, ids: dict[str, int], texts: dict[str, str], stop: threading.Event, tally: Tally,
                 versions: Versions) -> int:
    """PUT a new version of one uploaded document after another until stopped, each once the previous one is
    served (the indexing queue would otherwise fall ever further behind); returns how many were sent."""
    sent = 0
    names = sorted(ids)
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.wait(REPLACE_PAUSE_S):
            name = names[sent % len(names)]
            sent += 1
            raw = revised(texts[name], f"Replaced through the API, version {sent}", sent)
            versions.add(name, raw)
            try:
                r = client.put(f"{COLLECTION}/documents/{ids[name]}", files={"file": (name, raw.encode())})
                if r.status_code != 202:
                    tally.error(f"PUT {name}: {r.status_code} {r.text[:300]}")
                    continue
                while not stop.wait(0.2) and client.get(f"{COLLECTION}/documents/{ids[name]}").json()["job"]:
                    pass
            except httpx.HTTPError as exc:
                tally.error(f"PUT {name}: {type(exc).__name__}: {exc}")
    return sent


def pending_watcher(url: str, fresh: dict[int, str], stop: threading.Event, tally: Tally) -> None:
    """Reads each fresh upload's status until it is indexed, remembering the latest read that began while it was
    still pending (see Tally.hits_while_pending)."""
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.wait(0.05):
            for doc_id in [i for i, status in list(fresh.items()) if status == "pending"]:
                began = time.monotonic()
                try:
                    r = client.get(f"{COLLECTION}/documents/{doc_id}")
                except httpx.HTTPError as exc:
                    tally.error(f"GET document {doc_id}: {type(exc).__name__}: {exc}")
                    continue
                if not r.is_success:
                    tally.error(f"GET document {doc_id}: {r.status_code} {r.text[:300]}")
                    continue
                status = r.json()["status"]
                if status == "pending":
                    with tally.lock:
                        tally.pending_seen[doc_id] = began
                else:
                    fresh[doc_id] = status


def run_in_background(target: Callable[..., Any], *args: Any) -> tuple[threading.Thread, list[Any]]:
    """A thread whose return value (or exception) is kept, so that a failing client fails the test."""
    result: list[Any] = []

    def body() -> None:
        try:
            result.append(target(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the test, which fails with it
            result.append(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, result


def cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    """A writer process to its end: exit 0 and a clean stderr, or the test fails; its JSON report."""
    done = subprocess.run([*CLI, *args, "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and not BAD_OUTPUT.search(done.stderr), f"citerag {args}: {done.stderr[-2000:]}"
    out: dict[str, Any] = json.loads(done.stdout)
    return out


# No per-key rate limit: these clients are meant to saturate the server, and they share no key.
SERVE_FLAGS = ["--rate-limit", "none"]


@contextmanager
def background(argv: list[str], env: dict[str, str], log: Path, exits: dict[str, int | None]
               ) -> Iterator[subprocess.Popen[bytes]]:
    """A long-running process (the server, a worker), its output to `log`; stopped with SIGINT as a person stops
    it, its exit status kept in `exits` under the log's name."""
    with open(log, "wb") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            exits[log.name] = process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
            exits[log.name] = None


def wait_settled(client: httpx.Client, ids: list[int], timeout: float = 300) -> list[dict[str, Any]]:
    """Until no document is pending and none has a job queued or running; their final JSON."""
    deadline = time.monotonic() + timeout
    while True:
        docs = [client.get(f"{COLLECTION}/documents/{i}").json() for i in ids]
        if all(d["status"] != "pending" and d["job"] is None for d in docs):
            return docs
        assert time.monotonic() < deadline, f"still being indexed after {timeout}s: {docs}"
        time.sleep(0.2)


def upload(client: httpx.Client, texts: dict[str, str], names: list[str], versions: Versions) -> dict[str, int]:
    for name in names:
        versions.add(name, texts[name])
    r = client.post(f"{COLLECTION}/documents", files=[("files", (n, texts[n].encode())) for n in names])
    assert r.status_code == 202, r.text
    return {d["name"]: d["id"] for d in r.json()["documents"]}
