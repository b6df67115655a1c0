"""The task a worker runs: index one uploaded document through the application core.

The core (Citerag.open_home) composes the store, the indexer and the encoder exactly as the API process does;
the worker only reads the original bytes from the shared originals and calls Collection.index_document, as the
in-process thread queue does (citerag.app.uploads.index_upload). A document's own failure (bad file, nothing to
extract) is stored by index_document as `failed` with its reason on the first run; what raises here is the
environment (the store unreachable, a bug), and that is retried with backoff until the document has had
`queue_attempts` runs; the last one stores the reason. A crash that takes the worker down is counted by the
recovery pass instead (recovery.py), with the same bound.
"""

from __future__ import annotations

import logging
import time

import procrastinate

from citerag.app import sources
from citerag.app.home import Citerag
from citerag.app.uploads import index_upload, mark_failed
from citerag.errors import CiteragError, StoreUnavailable
from citerag.jobs import Job, OnFinished
from citerag.jobs.procrastinate import register_sync_task, register_task
from citerag.settings import Settings

log = logging.getLogger("citerag.workers")


class Runtime:
    """What every job of one worker process shares: the settings and the application core (models load once)."""

    def __init__(self, settings: Settings, core: Citerag) -> None:
        self.settings = settings
        self.core = core
        self.attempts = settings.queue_attempts
        self.lease_s = settings.queue_lease_s
        self.pruned_at = float("-inf")  # when this worker last deleted old succeeded jobs (recovery.py)
        self.on_finished: OnFinished | None = None  # each outcome, by collection name (metrics)

    def index(self, job: Job, run: int) -> str:
        """Run `job` (its `run`-th attempt); the outcome's status, or "skipped"."""
        started = time.monotonic()
        log.info("document %s of %s (%s): indexing, attempt %d of %d", job.document_id, job.collection, job.name,
                 run, self.attempts)
        try:
            # Another process may have deleted the collection and created it again since this worker opened it.
            self.core.refresh(job.collection)
            outcome = index_upload(self.core, job, serialise=False)
        except Exception as exc:
            what = "store unavailable" if isinstance(exc, StoreUnavailable) else type(exc).__name__
            if run >= self.attempts:
                self.give_up(job, f"{what}: {exc} (gave up after {run} attempts, queue_attempts)")
            else:
                log.warning("document %s of %s: %s: %s; retried later (attempt %d of %d)", job.document_id,
                            job.collection, what, exc, run, self.attempts)
            raise  # procrastinate retries it (RetryStrategy) or, out of attempts, marks the job failed
        if outcome is not None and self.on_finished is not None:
            self.on_finished(job.collection, outcome)
        status = outcome.status if outcome is not None else "skipped"
        log.info("document %s of %s (%s): %s in %.1fs", job.document_id, job.collection, job.name, status,
                 time.monotonic() - started)
        return status

    def give_up(self, job: Job, reason: str) -> None:
        """The document ends `failed` with `reason` (an indexed one keeps serving its version, with the reason)."""
        log.error("document %s of %s (%s): failed: %s", job.document_id, job.collection, job.name, reason)
        try:
            collection = self.core.collection(job.collection)
            outcome = mark_failed(collection, job, reason)
            if self.on_finished is not None:
                self.on_finished(job.collection, outcome)
        except CiteragError as exc:  # the store is down too: the document stays pending, the job failed
            log.error("document %s of %s: could not store its failure: %s", job.document_id, job.collection, exc)


    def sync(self, collection: str, source: str) -> str:
        """Sync a source (citerag.app.sources): its report's outcome; a failing origin is the source's own status
        and backoff, another sync of it running a skip."""
        try:
            self.core.refresh(collection)
            report = sources.sync(self.core.collection(collection), source)
        except sources.SourceBusy:
            return "skipped"
        except CiteragError as exc:  # the collection or the source was removed while the job waited
            log.warning("source %s of %s: %s", source, collection, exc)
            return "skipped"
        log.info("source %s of %s: %d added, %d changed, %d removed, %d failed%s", source, collection, report.added,
                 report.changed, report.removed, report.failed, f"; {report.error}" if report.error else "")
        return "failed" if report.error else "synced"


def register(app: procrastinate.App, runtime: Runtime) -> None:
    """Register the tasks on a worker's App: indexing, its retries bounded by the settings; a source's sync."""
    register_task(app, runtime.index, runtime.attempts)
    register_sync_task(app, runtime.sync)
