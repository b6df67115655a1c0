"""The default queue: one background thread of the API process indexes uploads one at a time.

A plain thread and a queue.Queue, not a job library: the work never leaves this process and nothing outlives it
(documents left `pending` by a stopped server are queued again when it starts, from their stored bytes). Several
API processes or machines use the procrastinate queue instead (jobs_procrastinate.py).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import Counter
from collections.abc import Callable

from citerag.app import Citerag, Collection, Outcome
from citerag.errors import CiteragError, StoreUnavailable
from citerag.service.jobs import Job, index_upload

log = logging.getLogger("citerag.service")


class ThreadQueue:
    def __init__(self, app: Citerag) -> None:
        self.app = app
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
        self.on_finished: Callable[[Collection, Outcome], None] | None = None  # each indexed job's outcome (metrics)
        self._thread = threading.Thread(target=self._run, name="citerag-ingest", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def submit(self, job: Job) -> None:
        key = (job.collection, job.document_id)
        with self._lock:
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

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            key = (job.collection, job.document_id)
            with self._lock:
                self._waiting[key] -= 1
                if self._waiting[key] <= 0:
                    del self._waiting[key]
                if key in self._cancelled:
                    self._cancelled.discard(key)
                    continue
                self._running.add(key)
            try:
                self._index(job)
            except Exception:  # the queue must outlive any one document; the document keeps its reason
                log.exception("indexing document %s of %s failed", job.document_id, job.collection)
            finally:
                with self._lock:
                    self._running.discard(key)

    def _index(self, job: Job) -> None:
        try:
            outcome = index_upload(self.app, job)
        except StoreUnavailable as exc:
            # Nothing is blamed on the document: it stays pending and is queued again when the server restarts.
            log.error("store unavailable while indexing document %s of %s: %s", job.document_id, job.collection, exc)
            return
        if outcome is not None and self.on_finished is not None:
            try:
                collection = self.app.collection(job.collection)
            except CiteragError:
                return
            self.on_finished(collection, outcome)
