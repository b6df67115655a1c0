"""The default queue: one background thread of the API process indexes uploads one at a time.

A plain thread and a queue.Queue, not a job library: the work never leaves this process. What a client was
promised (a 202) outlives it: each submitted job is also written to a journal folder (INDEX/jobs/, one small file
per document, its latest job) until it has run, and a server that was killed or stopped with jobs waiting runs
them when it starts again. Without it a replacement (PUT) accepted just before a crash was lost: its document is
`indexed` at the old version, so nothing else says that a newer one waits. Several API processes or machines use
the procrastinate queue instead (procrastinate.py).

The queue runs each job through its handler (`run`, citerag.app.uploads.index_upload in the service): a handler that
raises StoreUnavailable leaves its job journaled, to run when the queue starts again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
from collections import Counter
from pathlib import Path

from citerag.errors import StoreUnavailable
from citerag.jobs.job import Handler, Job, OnFinished

log = logging.getLogger("citerag.service")  # the API process's log, as before the queue had its own package
JOURNAL = "jobs"  # the journal's folder in the home index folder


class Journal:
    """Jobs submitted and not yet run, one file per document (its latest job), written whole (a temporary file
    synced, then renamed over it) before the job is queued."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def _path(self, job: Job) -> Path:
        key = hashlib.sha256(f"{job.collection}\0{job.document_id}".encode()).hexdigest()[:32]
        return self.folder / f"{key}.json"

    def record(self, job: Job) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self._path(job)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump({"collection": job.collection, "document_id": job.document_id, "name": job.name,
                           "sha256": job.sha256, "submitted": time.time_ns()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            # A full disk stops the write half way: no half-written file stays in the journal (`waiting` never
            # reads a .tmp, so nothing else would ever remove it).
            tmp.unlink(missing_ok=True)
            raise

    def done(self, job: Job) -> None:
        """Forget `job` once it has run, unless a later job of its document took its place in the journal."""
        path = self._path(job)
        try:
            if json.loads(path.read_text(encoding="utf-8"))["sha256"] == job.sha256:
                path.unlink()
        except (OSError, ValueError, KeyError):
            pass  # already gone, or unreadable: nothing to keep either way

    def waiting(self) -> list[Job]:
        """The jobs a previous process left, oldest first."""
        found: list[tuple[int, Job]] = []
        for path in self.folder.glob("*.json") if self.folder.is_dir() else ():
            try:
                d = json.loads(path.read_text(encoding="utf-8"))
                found.append((int(d["submitted"]), Job(str(d["collection"]), int(d["document_id"]), str(d["name"]),
                                                       str(d["sha256"]))))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("unreadable job %s in %s (%s): removed", path.name, self.folder, exc)
                path.unlink(missing_ok=True)
        return [job for _, job in sorted(found, key=lambda item: item[0])]


class ThreadQueue:
    def __init__(self, run: Handler, journal: Path | None = None) -> None:
        self.run = run  # what runs one job (its outcome goes to on_finished)
        self.journal = Journal(journal) if journal is not None else None  # None: nothing outlives the process
        self._queue: queue.Queue[Job | None] = queue.Queue()
        # Per (collection, document id): jobs waiting, and whether one runs. A count, not one state per document:
        # a replacement PUT while an earlier version waits queues a second job, which must still be reported
        # (and counted in the depth) after the first one finishes.
        self._waiting: Counter[tuple[str, int]] = Counter()
        self._running: set[tuple[str, int]] = set()
        self._cancelled: set[tuple[str, int]] = set()
        # The bytes last submitted per document, so that `retry` of a replacement that failed finds them again
        # (the store keeps the served version's hash; this map lives as long as the process).
        self._submitted: dict[tuple[str, int], Job] = {}
        self._lock = threading.Lock()
        self.on_finished: OnFinished | None = None  # each indexed job's outcome (metrics)
        self._thread = threading.Thread(target=self._run, name="citerag-ingest", daemon=True)

    def start(self) -> None:
        if self.journal is not None:
            with self._lock:
                for job in self.journal.waiting():  # before the server takes requests: they run first, in order
                    self._enqueue(job)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        # Journaled and queued under one lock, so that a document's latest job in the journal is the one queued last.
        with self._lock:
            if self.journal is not None:
                self.journal.record(job)
            self._enqueue(job)

    def _enqueue(self, job: Job) -> None:
        """Queue `job` (the caller holds the lock)."""
        key = (job.collection, job.document_id)
        self._cancelled.discard(key)
        self._waiting[key] += 1
        self._submitted[key] = job
        self._queue.put(job)

    def state(self, collection: str, document_id: int) -> str | None:
        key = (collection, document_id)
        with self._lock:
            return "running" if key in self._running else "queued" if self._waiting[key] else None

    def depth(self) -> int:
        with self._lock:
            return sum(self._waiting.values())

    def cancel(self, collection: str, document_id: int) -> None:
        """A deleted document's queued job is skipped (a running one finishes; its delete waits for it on the
        collection's write lock)."""
        with self._lock:
            self._cancelled.add((collection, document_id))

    def last_submitted(self, collection: str, document_id: int) -> Job | None:
        with self._lock:
            return self._submitted.get((collection, document_id))

    def submit_sync(self, collection: str, source: str) -> bool:
        return False  # the API process's own scheduler thread runs its syncs (citerag.app.syncer)

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            key = (job.collection, job.document_id)
            with self._lock:
                self._waiting[key] -= 1
                if self._waiting[key] <= 0:
                    del self._waiting[key]
                if key in self._cancelled:
                    self._cancelled.discard(key)
                    self._done(job)
                    continue
                self._running.add(key)
            ran = True
            try:
                ran = self._index(job)
            except Exception:  # the queue must outlive any one document; the document keeps its reason
                log.exception("indexing document %s of %s failed", job.document_id, job.collection)
            finally:
                with self._lock:
                    self._running.discard(key)
                    if ran:
                        self._done(job)

    def _done(self, job: Job) -> None:
        if self.journal is not None:
            self.journal.done(job)

    def _index(self, job: Job) -> bool:
        """Run the job; False when it could not run (the store is down): it stays journaled for a restart."""
        try:
            outcome = self.run(job)
        except StoreUnavailable as exc:
            # Nothing is blamed on the document: it stays as it was, and its job runs again when the server restarts.
            log.error("store unavailable while indexing document %s of %s: %s", job.document_id, job.collection, exc)
            return False
        if outcome is not None and self.on_finished is not None:
            self.on_finished(job.collection, outcome)
        return True
