"""One upload's job run through the application core: what both queues' jobs do, the thread queue's handler in
the API process and the task of each `citerag worker` (citerag.workers.tasks). It sits above citerag.app and
below the service and the workers; the queues themselves (citerag.jobs) never see the core.

    index_upload  index one job's bytes into its document (a queue's handler)
    mark_failed   a document that failed outside index_document (a crash, an outage) ends failed
    counting      an on_finished that counts each outcome, and an indexed document's chunks, in the metrics
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.errors import CiteragError
from citerag.ingest.files import Outcome, Source
from citerag.jobs import Job, OnFinished

log = logging.getLogger("citerag.service")  # the log these lines always went to


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
    data = collection.read_original(doc, job.sha256)
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
            collection.forget_original(doc.sha256)
    return outcome


def mark_failed(collection: Collection, job: Job, reason: str) -> Outcome:
    """A document that failed outside index_document (a crash, an outage) ends failed with the reason."""
    return collection.fail_document(job.document_id, job.sha256, job.name, reason)


def counting(app: Citerag, count: Callable[[str, int], None]) -> OnFinished:
    """An on_finished for a queue or a worker: `count(status, chunks)` for each outcome, the chunks an indexed
    document stored (0 otherwise). An outcome whose collection is gone by now is not counted."""

    def finished(collection_name: str, outcome: Outcome) -> None:
        try:
            collection = app.collection(collection_name)
        except CiteragError:
            return
        chunks = 0
        if outcome.status == "indexed":
            doc = collection.document(outcome.document_id)
            if doc is not None:
                chunks = doc.chunk_count
        count(outcome.status, chunks)

    return finished
