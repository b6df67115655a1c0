"""Ingestion workers on the procrastinate queue, end to end: a real PostgreSQL (the pg_url fixture), real
`citerag worker` subprocesses, real documents (Debian Reference chapters), and the outcome read from the
database itself (the store's change log, its chunks and vectors, procrastinate's jobs and events), not from what
a worker says it did."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from queue_harness import ATTEMPTS, HERE, LEASE_S, Pool, database, make_home, submit, wait_for

from citerag.app.home import Citerag, open_queue
from citerag.app.uploads import index_upload
from citerag.ingest.files import Source
from citerag.jobs import Job
from citerag.types import UPLOAD_SCHEME
from corpus_paths import DATA, DEV_CORPUS

SMALL = [DEV_CORPUS / n for n in ("apa.en.html", "pr01.en.html", "ch08.en.html", "ch03.en.html", "ch04.en.html",
                                  "ch05.en.html")]
BIG = DEV_CORPUS / "ch09.en.html"  # 389 KB, ~240 chunks: several seconds of embedding on a CPU


def test_two_workers_share_the_documents_and_index_each_once(pg_url: str, tmp_path: Path) -> None:
    settings = make_home(tmp_path / "home", pg_url)
    pool = Pool(settings.index_dir, tmp_path)
    started = time.monotonic()
    with database(pg_url) as db:
        try:
            pool.start(2)
            wait_for("two workers registered", lambda: db.live_workers() == 2, 120)
            ids = submit(settings, [(p.name, p.read_bytes()) for p in SMALL])
            wait_for("every job finished", lambda: len(db.jobs()) == len(ids)
                     and all(j["status"] == "succeeded" for j in db.jobs()), 300)
            workers_used = {j["worker_id"] for j in db.jobs()}  # before the workers stop (then they are gone)
        finally:
            codes = pool.stop()
        docs = db.documents()
        for name, doc_id in ids.items():
            status, error, chunk_count = docs[doc_id]
            assert (status, error) == ("indexed", None), name
            # Accepted once, indexed once: two entries of the store's change log, whoever ran the job.
            assert db.changes(doc_id) == 2, name
            assert db.chunk_rows(doc_id) == (chunk_count, chunk_count, chunk_count), name
        assert all(j["attempts"] == 1 for j in db.jobs())
    assert len(workers_used) == 2, f"one worker did every job: {pool.output()}"
    assert codes == [0, 0], pool.output()  # SIGTERM: a graceful stop
    print(f"{len(ids)} documents, two workers: {time.monotonic() - started:.1f}s")


def test_a_killed_workers_document_goes_to_another_after_the_lease_and_is_indexed_once(
        pg_url: str, tmp_path: Path) -> None:
    settings = make_home(tmp_path / "home", pg_url)
    pool = Pool(settings.index_dir, tmp_path)
    with database(pg_url) as db:
        try:
            first = pool.add()
            wait_for("the first worker registered", lambda: db.live_workers() == 1, 120)
            doc_id = submit(settings, [(BIG.name, BIG.read_bytes())])[BIG.name]
            wait_for("the first worker on the document", lambda: db.job_of(doc_id)["status"] == "doing", 60)
            time.sleep(2.0)  # into the document: loading the encoder, extracting, embedding
            first.kill()
            killed_at = db.rows("SELECT now()")[0][0]
            # Killed mid-document: nothing of it was committed, and the job still looks taken.
            assert db.documents()[doc_id][0] == "pending", first.output()
            assert db.changes(doc_id) == 1
            assert db.chunk_rows(doc_id) == (0, 0, 0)
            assert db.job_of(doc_id)["status"] == "doing"
            pool.add()
            wait_for("the job finished by the second worker", lambda: db.job_of(doc_id)["status"] == "succeeded",
                     300)
        finally:
            pool.stop()
        status, error, chunk_count = db.documents()[doc_id]
        assert (status, error) == ("indexed", None)
        assert chunk_count > 100
        assert db.changes(doc_id) == 2  # indexed exactly once
        assert db.chunk_rows(doc_id) == (chunk_count, chunk_count, chunk_count)  # nothing duplicated
        job = db.job_of(doc_id)
        assert job["attempts"] == 2  # the killed run and the one that finished
        events = [e for e in db.rows("SELECT type::text, at FROM procrastinate_events WHERE job_id = %s ORDER BY id",
                                     job["id"]) if e[0] in ("started", "deferred_for_retry", "succeeded")]
        assert [e[0] for e in events] == ["started", "deferred_for_retry", "started", "succeeded"]
        handed_back_after = (events[1][1] - killed_at).total_seconds()
    # Handed back only once the dead worker's heartbeat (every lease/3) was older than the lease.
    assert handed_back_after >= LEASE_S * 2 / 3, handed_back_after
    assert f"retried (attempt 2 of {ATTEMPTS})" in pool.output()
    print(f"killed mid-document; handed back {handed_back_after:.1f}s later (lease {LEASE_S:g}s)")


def test_a_poison_file_ends_failed_after_its_attempts_and_never_holds_the_others(
        pg_url: str, tmp_path: Path) -> None:
    from poisoned_worker import KILL_MARK, OUTAGE_MARK

    settings = make_home(tmp_path / "home", pg_url)
    markdown = DATA / "markdown" / "debian-reference"
    good = [(p.name, p.read_bytes()) for p in (DEV_CORPUS / "apa.en.html", DEV_CORPUS / "pr01.en.html",
                                               DEV_CORPUS / "ch08.en.html", markdown / "ch04.md")]
    kills = ("kills-its-worker.md", (markdown / "apa.md").read_bytes() + b"\n\n" + KILL_MARK + b"\n")
    outage = ("store-outage.md", (markdown / "apa.md").read_bytes() + b"\n\n" + OUTAGE_MARK + b"\n")
    broken = ("broken.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 64)  # a bad file fails on its first run
    pool = Pool(settings.index_dir, tmp_path, script=HERE / "poisoned_worker.py")
    started = time.monotonic()
    with database(pg_url) as db:
        try:
            pool.start(2)
            wait_for("two workers registered", lambda: db.live_workers() == 2, 120)
            ids = submit(settings, [kills, outage, broken, *good])  # the poison first in the queue

            def finished() -> bool:
                pool.supervise()  # a dead worker is started again, as systemd or compose would
                jobs = db.jobs()
                return len(jobs) == len(ids) and all(j["status"] in ("succeeded", "failed") for j in jobs)

            wait_for("every job finished", finished, 300)
        finally:
            pool.stop()
        docs = db.documents()
        log = pool.output()
        # The file that kills its worker: exactly `queue_attempts` runs (each one a dead worker), then failed.
        assert pool.deaths == [-9] * ATTEMPTS, log
        status, error, _ = docs[ids[kills[0]]]
        assert status == "failed" and f"gave up after {ATTEMPTS} attempts" in (error or ""), error
        assert "killed or crashed" in (error or "")
        assert db.job_of(ids[kills[0]])["status"] == "failed"
        # The store outage: retried with backoff, then failed with the outage as its reason.
        status, error, _ = docs[ids[outage[0]]]
        assert status == "failed" and "injected outage" in (error or "") \
            and f"gave up after {ATTEMPTS} attempts" in (error or ""), error
        assert db.job_of(ids[outage[0]])["attempts"] == ATTEMPTS
        # A bad file is the document's own failure: stored on its first run, no retry.
        status, error, _ = docs[ids[broken[0]]]
        assert status == "failed" and error and "attempts" not in error, error
        assert db.job_of(ids[broken[0]])["attempts"] == 1
        # Every other document indexed once, on its first attempt, and taken up by a worker before the poison had
        # used up its attempts: the poison never held the queue. (Started, not finished: which of the last good
        # document's commit and the poison's last failure comes first is a race of a few seconds on 2 cores.)
        poison_job = db.job_of(ids[kills[0]])["id"]
        gave_up_at = db.rows("SELECT max(at) FROM procrastinate_events WHERE job_id = %s AND type = 'failed'",
                             poison_job)[0][0]
        assert gave_up_at is not None
        for name, _ in good:
            assert docs[ids[name]][:2] == ("indexed", None), name
            assert db.changes(ids[name]) == 2, name
            job = db.job_of(ids[name])
            assert job["attempts"] == 1, name
            started_at = db.rows("SELECT min(at) FROM procrastinate_events WHERE job_id = %s AND type = 'started'",
                                 job["id"])[0][0]
            assert started_at < gave_up_at, name
    print(f"poison: {len(pool.deaths)} dead workers, all settled in {time.monotonic() - started:.1f}s")


def _submit_to(core: Citerag, name: str, path: Path) -> int:
    """Upload one file into collection `name` as the API does; its document id."""
    collection = core.collection(name)
    data = path.read_bytes()
    sha = collection.save_original(data)
    doc = collection.accept(Source(UPLOAD_SCHEME + path.name, data, path.name)).document
    queue = open_queue(core.collection().settings, partial(index_upload, core))
    queue.start()
    try:
        queue.submit(Job(name, doc.id, doc.name, sha))
    finally:
        queue.stop()
    return doc.id


def test_a_collection_deleted_and_created_again_is_served_by_a_running_worker(pg_url: str, tmp_path: Path) -> None:
    """A worker opened `team` for a first job; another process then deletes `team` and creates it again (new id,
    same name). The worker's next job is the new collection's, and it indexes it instead of skipping it as gone."""
    settings = make_home(tmp_path / "home", pg_url)
    pool = Pool(settings.index_dir, tmp_path)
    with database(pg_url) as db, Citerag.open_home(settings) as core:
        try:
            pool.start(1)
            core.create_collection("team", {})
            first = _submit_to(core, "team", SMALL[0])
            wait_for("the first document indexed", lambda: db.settled([first]), 120)
            core.drop_collection("team")
            core.create_collection("team", {})
            second = _submit_to(core, "team", SMALL[1])
            wait_for("the recreated collection's document indexed", lambda: db.settled([second]), 120)
        finally:
            pool.stop()
        assert db.documents()[second][0] == "indexed", pool.output()
        assert first not in db.documents()


def test_succeeded_jobs_older_than_a_week_are_pruned_and_failed_ones_kept(pg_url: str, tmp_path: Path) -> None:
    import asyncio

    from citerag.jobs.procrastinate import worker_app
    from citerag.workers.recovery import KEEP_SUCCEEDED_H, prune_finished
    from citerag.workers.tasks import Runtime

    settings = make_home(tmp_path / "home", pg_url)
    pool = Pool(settings.index_dir, tmp_path)
    with database(pg_url) as db:
        try:
            pool.start(1)
            ids = submit(settings, [(p.name, p.read_bytes()) for p in SMALL[:3]])
            wait_for("every job finished", lambda: len(db.jobs()) == 3
                     and all(j["status"] == "succeeded" for j in db.jobs()), 120)
        finally:
            pool.stop()
        old, failed, recent = (db.job_of(ids[p.name])["id"] for p in SMALL[:3])
        # One succeeded job finished more than a week ago; one failed job as old (kept for its retry's bytes).
        db.rows(f"UPDATE procrastinate_events SET at = now() - interval '{KEEP_SUCCEEDED_H + 1} hours'"
                " WHERE job_id = ANY(%s) RETURNING 1", [old, failed])
        db.rows("UPDATE procrastinate_jobs SET status = 'failed' WHERE id = %s RETURNING 1", failed)

        async def prune() -> None:
            app = worker_app(pg_url, 1)
            async with app.open_async():
                with Citerag.open_home(settings) as core:
                    await prune_finished(app, Runtime(settings, core))

        asyncio.run(prune())
        assert {j["id"] for j in db.jobs()} == {failed, recent}


def test_a_worker_exports_what_it_indexed_for_prometheus(pg_url: str, tmp_path: Path) -> None:
    """With procrastinate the API process never sees an outcome: each worker serves the ingest counters itself."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families
    from queue_harness import Worker

    from citerag.local_postgres import free_port

    settings = make_home(tmp_path / "home", pg_url)
    port = free_port()
    worker = Worker(settings.index_dir, tmp_path / "worker.log", args=("--metrics-port", str(port))).start()
    good = SMALL[0]
    broken = ("broken.pdf", b"%PDF-1.7\n" + bytes(range(256)) * 64)
    with database(pg_url) as db:
        try:
            ids = submit(settings, [(good.name, good.read_bytes()), broken])
            wait_for("both documents settled", lambda: db.settled(list(ids.values())), 120)
            chunks = db.documents()[ids[good.name]][2]
            samples = {(s.name, s.labels.get("outcome")): s.value
                       for family in text_string_to_metric_families(
                           httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
                       for s in family.samples}
        finally:
            worker.stop()
    assert samples[("citerag_ingest_documents_total", "indexed")] == 1, worker.output()
    assert samples[("citerag_ingest_documents_total", "failed")] == 1
    assert samples[("citerag_ingest_chunks_total", None)] == chunks > 0
