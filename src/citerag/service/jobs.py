"""Uploads are indexed in the background, one job per document, by one of two queues behind `IngestQueue`:

- "thread" (jobs_thread.py, the default): a thread of the API process; jobs not yet run are kept in a journal
  (INDEX/jobs/) and run when a killed or stopped server starts again, from their stored bytes. One machine, one
  API process.
- "procrastinate" (jobs_procrastinate.py, citerag.workers): jobs in the PostgreSQL store's own database, run by
  any number of `citerag worker` processes on any machine; they outlive every process.

The settings' `queue` picks one (open_queue). Both index a job the same way (index_upload).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

from citerag.app import Citerag, Collection, Outcome, Source
from citerag.errors import CiteragError
from citerag.service.originals import forget_original, read_original
from citerag.settings import Settings

log = logging.getLogger("citerag.service")


@dataclass(frozen=True)
class Job:
    collection: str
    document_id: int
    name: str  # the file name that picks the extractor (a replacement keeps the document's own)
    sha256: str


class IngestQueue(Protocol):
    """What the routes, the metrics and the server's start and stop need from a queue."""

    on_finished: Callable[[Collection, Outcome], None] | None  # each job's outcome, where this process sees it

    def start(self) -> None: ...

    def stop(self, timeout: float = 30.0) -> None: ...

    def submit(self, job: Job) -> None:
        """Index `job` in the background (a later job of the same document runs after it)."""

    def state(self, collection: str, document_id: int) -> str | None:
        """"queued", "running", or None when the document has no job waiting or running."""

    def depth(self) -> int:
        """Jobs waiting for a worker."""

    def cancel(self, collection: str, document_id: int) -> None:
        """A deleted document's waiting jobs are dropped; a running one finishes first (this waits for it)."""

    def last_submitted(self, collection: str, document_id: int) -> Job | None:
        """The job last submitted for the document (a retry of a failed replacement finds its bytes there)."""


def open_queue(app: Citerag, settings: Settings) -> IngestQueue:
    """The queue the settings name (`queue`): "thread" or "procrastinate"."""
    if settings.queue == "procrastinate":
        from citerag.service.jobs_procrastinate import ProcrastinateQueue

        return ProcrastinateQueue(settings)
    from citerag.service.jobs_thread import JOURNAL, ThreadQueue

    return ThreadQueue(app, settings.index_dir / JOURNAL)


def index_upload(app: Citerag, job: Job, *, serialise: bool = True) -> Outcome | None:
    """Index one job's bytes into its document: None when there is nothing to do (the collection or the document
    was deleted, or the bytes are gone). A document's own failure is its outcome; StoreUnavailable is raised.

    `serialise` takes the collection's write lock (the API process's writers take turns; a worker relies on the
    queue's per-document lock and the store's transactions instead)."""
    try:
        collection = app.collection(job.collection)
    except CiteragError:
        return None  # the collection was deleted while the job waited
    doc = collection.document(job.document_id)
    if doc is None:
        return None  # deleted while queued
    data = read_original(collection, doc, job.sha256)
    if data is None:
        log.warning("document %s of %s: stored bytes %s missing, left as it is", doc.id, job.collection,
                    job.sha256[:12])
        return None
    lock: AbstractContextManager[Any] = collection.write_lock if serialise else nullcontext()
    with lock:
        if collection.document(job.document_id) is None:
            return None
        outcome = collection.index_document(Source(doc.source_path, data, name=job.name))
        if doc.sha256 != job.sha256:  # a replacement: the old bytes go once nothing refers to them
            forget_original(collection, doc.sha256)
    return outcome
