"""Concurrency across processes (issue 13): queries keep answering while ingestion, replacement and reindexing run
in other processes; readers never see a partial document; no error reaches a user. On both store backends.

A real `citerag serve` (127.0.0.1, a free port, the packaged MiniLM) answers search and ask requests from several
client threads, and `citerag search` / `citerag ask` processes answer beside it, through three phases, each with
another writer process:

- ingest:  `citerag ingest` of a new folder into the same index;
- replace: files rewritten with an appended marker paragraph, then `citerag ingest` of their folder again;
- reindex: `citerag reindex --stale` under another chunking strategy (a stamped setting, so every document is
  rebuilt),

while, through every phase, new versions of uploaded documents are PUT through the API and fresh documents are
uploaded (pending until indexed). With SQLite the server's own queue indexes them (a writer inside the reading
process, beside the CLI writer in another); with PostgreSQL, as deployed, a `citerag worker` process does.

Checked on every response: a 2xx (any other status, an error body, a timeout or a connection error is counted);
every citation's quote is its document's text at [start:end] for one version the test wrote, and all citations of
one document in one response come from the same version (a torn read would pair chunks of two); no hit names a
fresh document that a read which began after the response ended still saw pending. Afterwards: every process
exited 0 with no "locked" and no traceback in its output, and each document serves its last version.

tests/test_consistency.py holds the in-process versions (deterministic encoder, a writer stopped at every step).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from concurrency_harness import (
    BAD_OUTPUT,
    CLI,
    COLLECTION,
    PHASES,
    SERVE_FLAGS,
    Phase,
    Tally,
    Versions,
    api_replacer,
    background,
    cli,
    cli_reader,
    http_reader,
    pending_watcher,
    queries,
    revised,
    run_in_background,
    upload,
    wait_settled,
)
from corpus100 import make_corpus, sections

from citerag.chunk import chunk_extracted
from citerag.extract import extractor_for
from http_servers import free_port, wait_healthy

# Sizes chosen so both backends run in about a minute each on 2 quiet cores: each phase's writer embeds for
# several seconds (the reindex rebuilds every document), long enough for the readers to answer many queries.
BASE, NEW, UPLOADED, FRESH = 6, 12, 4, 4
HTTP_READERS = 3


def run_backend(tmp: Path, store_url: str | None) -> dict[str, Any]:
    """The whole run on one store; what it saw (see the test for what must hold)."""
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITERAG_")}
    if store_url:
        # PostgreSQL as deployed (docs/scaling.md): uploads and replacements are jobs that a `citerag worker`
        # process indexes, so the API process only reads.
        env.update(CITERAG_STORE_URL=store_url, CITERAG_QUEUE="procrastinate")
    home = tmp / "home"
    texts = make_corpus(tmp / "corpus")
    names = list(texts)  # spread over the chapters; every slice below takes every 4th
    base, new, uploaded = names[0::4][:BASE], names[1::4][:NEW], names[2::4][:UPLOADED + FRESH]
    versions = Versions()
    for folder, chosen in (("base", base), ("new", new)):
        (tmp / folder).mkdir()
        for name in chosen:
            (tmp / folder / name).write_text(texts[name], encoding="utf-8")
            versions.add(name, texts[name])
    cli(env, "ingest", str(tmp / "base"), "--index", str(home))
    asked = queries(texts)
    phase, tally, stop, stop_replacing = Phase(), Tally(), threading.Event(), threading.Event()
    reports: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    exits: dict[str, int | None] = {}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = [*CLI, "serve", "--index", str(home), "--port", str(port), "--no-keys", *SERVE_FLAGS]
    with ExitStack() as running:
        server = running.enter_context(background(serve, env, tmp / "serve.log", exits))
        if store_url:
            running.enter_context(background([*CLI, "worker", "--index", str(home)], env, tmp / "worker.log", exits))
        client = running.enter_context(httpx.Client(base_url=url, timeout=120))
        wait_healthy(url, server, tmp / "serve.log")
        ids = upload(client, texts, uploaded[:UPLOADED], versions)
        wait_settled(client, list(ids.values()))
        fresh: dict[int, str] = {}
        clients = [run_in_background(http_reader, url, i, stop, phase, tally, versions, asked)
                   for i in range(HTTP_READERS)]
        clients.append(run_in_background(cli_reader, env, home, stop, phase, tally, versions, asked))
        clients.append(run_in_background(pending_watcher, url, fresh, stop, tally))
        replacer, sent = run_in_background(api_replacer, url, ids, texts, stop_replacing, tally, versions)
        fresh_names = iter(uploaded[UPLOADED:])
        try:
            for name in PHASES:
                began = time.monotonic()
                phase.name = name
                # Fresh uploads (two in the first phase), pending until the queue reaches them behind the PUTs.
                for _ in range(2 if name == "ingest" else 1):
                    fresh.update({i: "pending" for i in upload(client, texts, [next(fresh_names)], versions).values()})
                if name == "ingest":
                    reports[name] = cli(env, "ingest", str(tmp / "new"), "--index", str(home))
                elif name == "replace":
                    for path in sorted((tmp / "base").iterdir()):
                        raw = revised(texts[path.name], "Replaced on disk, the mirror moved", 0)
                        versions.add(path.name, raw)
                        path.write_text(raw, encoding="utf-8")
                    reports[name] = cli(env, "ingest", str(tmp / "base"), "--index", str(home))
                else:
                    # Strategy C (no headers) instead of E: a stamped setting, so every indexed document is stale.
                    reports[name] = cli({**env, "CITERAG_STRATEGY": "C"}, "reindex", "--stale", "--index", str(home))
                seconds[name] = time.monotonic() - began
            phase.name = "settle"
            stop_replacing.set()
            replacer.join(120)
            wait_settled(client, [*ids.values(), *fresh])
        finally:  # also when a phase failed: no client may go on against a server that is being stopped
            stop_replacing.set()
            stop.set()
        for thread, _ in [*clients, (replacer, sent)]:
            thread.join(300)
        failures = [r for _, result in [*clients, (replacer, sent)] for r in result if isinstance(r, BaseException)]
        assert not failures, failures
        # Each document now serves its last version, whole.
        served = {d["name"]: d for d in client.get(f"{COLLECTION}/documents").json()["documents"]}
        last_versions = []
        for name, text in versions.latest.items():
            doc = served[name]
            if doc["status"] != "indexed" or doc["error"] is not None:
                last_versions.append(f"{name}: {doc['status']} {doc['error']}")
            elif client.get(f"{COLLECTION}/documents/{doc['id']}/text").text != text:
                last_versions.append(f"{name}: not its last version")
    logs = "\n".join(log.read_text(errors="replace") for log in tmp.glob("*.log"))
    return {"answered": {p: tally.count(p) for p in PHASES}, "seconds": seconds, "by_kind": tally.per_kind(),
            "errors": tally.errors, "failures": tally.failures, "last_versions": last_versions, "exits": exits,
            "bad_log_lines": [line for line in logs.splitlines() if BAD_OUTPUT.search(line)],
            "hits_while_pending": tally.hits_while_pending(), "fresh_hits": sum(i in fresh for i, _ in tally.hits),
            "reports": {k: {"indexed": len(v["indexed"]), "failed": v["failed"]} for k, v in reports.items()},
            "puts": sent[0], "total_seconds": time.monotonic() - started}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_queries_answer_whole_documents_while_other_processes_write(backend: str, tmp_path: Path,
                                                                    request: pytest.FixtureRequest) -> None:
    store_url = None
    if backend == "postgres":
        pytest.importorskip("psycopg", reason="the PostgreSQL extra is missing: pip install -e '.[dev]'")
        store_url = request.getfixturevalue("pg_url")
    got = run_backend(tmp_path, store_url)
    answered, reports = got["answered"], got["reports"]
    indexed, failed = ({k: r[what] if what == "indexed" else len(r[what]) for k, r in reports.items()}
                       for what in ("indexed", "failed"))
    print(f"\nconcurrency {backend}: {sum(answered.values())} queries answered, {got['failures']} errors, "
          f"{got['total_seconds']:.0f} s; per phase {answered} in "
          f"{ {k: round(v) for k, v in got['seconds'].items()} } s; {got['by_kind']}; {got['puts']} PUTs; "
          f"{got['fresh_hits']} hits on {FRESH} fresh uploads; writers indexed "
          f"{indexed}, failed {failed}")
    assert got["failures"] == 0, got["errors"]
    assert got["bad_log_lines"] == []
    assert set(got["exits"].values()) == {0}, got["exits"]
    assert got["hits_while_pending"] == []
    assert got["last_versions"] == []
    assert all(n > 0 for n in answered.values()), answered
    assert reports["ingest"]["indexed"] == NEW and reports["replace"]["indexed"] == BASE
    assert reports["ingest"]["failed"] == reports["replace"]["failed"] == []
    # The reindex rebuilt every document the CLI ingested, and the uploads from their stored originals (one a PUT
    # replaced meanwhile is left to its newer version: unchanged, never overwritten).
    assert reports["reindex"]["failed"] == []
    assert reports["reindex"]["indexed"] >= BASE + NEW


def test_the_check_tells_a_torn_read_from_a_whole_one() -> None:
    """The check every response goes through, on responses made from two real versions of one document: chunks of
    one version pass, chunks of two versions or of two chunkings do not."""
    name, text = sections()[0]
    versions = Versions()
    chunks = {}
    for label, raw in (("old", text), ("new", revised(text, "Replaced on disk", 0))):
        versions.add(name, raw)
        extractor = extractor_for(Path(name))
        assert extractor is not None
        extracted = extractor.extract(raw.encode(), Path(name))
        for strategy in ("E", "C"):
            chunks[label, strategy] = [{"document_name": name, "start": c.start, "end": c.end, "quote": c.content}
                                       for c in chunk_extracted(extracted, strategy, 200, 0)]
    assert len(chunks["old", "E"]) > 2
    assert versions.problems(chunks["old", "E"]) == versions.problems(chunks["new", "C"]) == []
    assert versions.problems([chunks["old", "E"][0], chunks["new", "E"][1]])  # two versions
    assert versions.problems([chunks["old", "E"][-1], chunks["new", "E"][-1]])  # the tail of each
    mixed = [c for c in chunks["old", "C"] if c["start"] < chunks["old", "E"][1]["end"]]
    assert versions.problems([chunks["old", "E"][1], *mixed])  # one version, two chunkings


def test_a_replacement_queued_behind_another_stays_reported() -> None:
    """What the concurrent run found in the server's thread queue: a PUT while the document's previous version
    waited queued a second job, and the first job's end erased the document's state, so the API said `job: null`
    (settled) while the newer version still waited."""
    from citerag.jobs import Job
    from citerag.jobs.thread import ThreadQueue

    running = {sha: threading.Event() for sha in ("v1", "other", "v2")}
    release = {sha: threading.Event() for sha in running}

    def hold(job: Job) -> None:  # the handler: each job runs until the test releases it
        running[job.sha256].set()
        release[job.sha256].wait(30)

    queue = ThreadQueue(hold)
    queue.start()
    try:
        for doc, sha in ((1, "v1"), (2, "other"), (1, "v2")):
            queue.submit(Job("default", doc, f"{doc}.md", sha))
        assert running["v1"].wait(30)
        assert (queue.state("default", 1), queue.depth()) == ("running", 2)
        release["v1"].set()
        assert running["other"].wait(30)  # document 1's first job is done; its second still waits
        assert (queue.state("default", 1), queue.state("default", 2), queue.depth()) == ("queued", "running", 1)
        release["other"].set()
        assert running["v2"].wait(30)
        assert (queue.state("default", 1), queue.depth()) == ("running", 0)
        release["v2"].set()
    finally:
        for event in release.values():
            event.set()
        queue.stop()
    assert queue.state("default", 1) is None and queue.state("default", 2) is None


def test_the_cli_reindexes_and_retries_uploads(tmp_path: Path) -> None:
    """What the concurrent run found: `citerag reindex --stale` on a server's home could not rebuild an uploaded
    document, and `citerag retry` turned an upload the server had not indexed yet into a failed one. Both now read
    the stored original (citerag.originals)."""
    from citerag.app.home import Citerag
    from citerag.ingest.files import Source
    from citerag.settings import Settings
    from citerag.types import UPLOAD_SCHEME
    from fakes import HashEncoder

    def open_home(strategy: str) -> Citerag:
        app = Citerag()
        app.register_encoder(HashEncoder())
        app.open_collection(Settings(index_dir=tmp_path, embedding_model="hash-64", strategy=strategy), create=True)
        return app

    notes, later = b"# Notes\n\nThe ferry leaves from pier seven at noon.\n", b"# Later\n\nThe mirror moved.\n"
    with open_home("E") as app:
        collection = app.collection()
        for name, data in (("notes.md", notes), ("later.md", later)):
            collection.save_original(data)
            collection.accept(Source(UPLOAD_SCHEME + name, data, name))
        collection.index_document(Source(UPLOAD_SCHEME + "notes.md", notes, "notes.md"))  # later.md stays pending
        with open_home("C") as cli:  # the CLI, under another chunking strategy
            retried, rebuilt = cli.retry_failed(), cli.reindex_stale()
        status = {d.name: d for d in collection.documents()}
    assert status["later.md"].status != "failed", status["later.md"].error
    assert rebuilt.failed == [] and retried.failed == []
    assert status["notes.md"].stamps["strategy"] == "C" and not status["notes.md"].error
