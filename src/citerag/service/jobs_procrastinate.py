"""The shared queue: with `queue = "procrastinate"`, uploads, replacements and retries defer one job per document
into the PostgreSQL store's own database, and `citerag worker` processes on any machine run them (citerag.workers,
where the choice of procrastinate is explained). This API process only defers jobs and reads their state; it
never indexes. Status and the event stream read the document's status from the store as with the thread queue,
and each document's job state ("queued" / "running") and the queue depth from procrastinate's jobs table.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from citerag.app import Collection, Outcome
from citerag.service.jobs import Job
from citerag.settings import Settings
from citerag.workers import queue as q

STATE_TTL_S = 0.25  # a collection's job states are read at most this often (an event stream polls every 0.3 s)


class ProcrastinateQueue:
    def __init__(self, settings: Settings) -> None:
        self.url = settings.store_url
        self.lease_s = settings.queue_lease_s
        self.app = q.api_app(self.url)
        # Outcomes are seen by the workers, not here (the metrics' ingest counters stay at zero in this mode).
        self.on_finished: Callable[[Collection, Outcome], None] | None = None
        self._states: dict[str, tuple[float, dict[int, str]]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        with q.reaching(self.url, "open"):
            self.app.open()
        q.ensure_schema(self.app, self.url)

    def stop(self, timeout: float = 30.0) -> None:
        self.app.close()

    def submit(self, job: Job) -> None:
        with q.reaching(self.url, "write to"):
            q.defer(self.app, job)
        with self._lock:
            self._states.pop(job.collection, None)

    def state(self, collection: str, document_id: int) -> str | None:
        now = time.monotonic()
        with self._lock:
            cached = self._states.get(collection)
        if cached is None or now - cached[0] > STATE_TTL_S:
            with q.reaching(self.url, "read"):
                cached = (now, q.active_jobs(self.app, collection))
            with self._lock:
                self._states[collection] = cached
        return cached[1].get(document_id)

    def depth(self) -> int:
        with q.reaching(self.url, "read"):
            return q.depth(self.app)

    def cancel(self, collection: str, document_id: int) -> None:
        """Waiting jobs are cancelled; a running one is waited for (its worker may be dead: then until the lease
        hands it on and the next run finds the document gone), at most twice the lease."""
        with q.reaching(self.url, "write to"):
            for job in q.document_jobs(self.app, collection, document_id, status="todo"):
                assert job.id is not None
                self.app.job_manager.cancel_job_by_id(job.id)
            deadline = time.monotonic() + 2 * self.lease_s
            while q.document_jobs(self.app, collection, document_id, status="doing") \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
        with self._lock:
            self._states.pop(collection, None)

    def last_submitted(self, collection: str, document_id: int) -> Job | None:
        with q.reaching(self.url, "read"):
            found = q.document_jobs(self.app, collection, document_id)
        return q.job_of(found[-1]) if found else None
