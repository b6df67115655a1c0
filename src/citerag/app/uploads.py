"""Uploads through the application core: taking a file in (its bytes kept, its document pending, its job queued),
replacing, deleting and retrying one, and running one job, what both queues' jobs do (the thread queue's handler
in the API process, the task of each `citerag worker`). The queues themselves (citerag.jobs) never see the core.

    upload, replace, delete, retry   the flow behind the API's document routes
    index_upload  index one job's bytes into its document (a queue's handler)
    mark_failed   a document that failed outside index_document (a crash, an outage) ends failed
    counting      an on_finished that counts each outcome, and an indexed document's chunks, in the metrics
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.app.names import upload_name
from citerag.errors import CiteragError
from citerag.ingest.files import Outcome, Source
from citerag.jobs import IngestQueue, Job, OnFinished
from citerag.types import UPLOAD_SCHEME, Document

log = logging.getLogger("citerag.service")  # the log these lines always went to


@dataclass(frozen=True)
class Uploaded:
    """A file taken in: its document (new and pending with its job queued, or the one that already holds these
    bytes), or `conflict` when a different file already holds its name (then nothing was kept or queued)."""

    document: Document
    existed: bool
    sha256: str
    conflict: bool = False


def upload(collection: Collection, jobs: IngestQueue, name: str, data: bytes,
           tags: list[str] | None = None, groups: list[str] | None = None) -> Uploaded:
    """`tags` and `groups` (who may read it), when given, replace the document's (checked by the caller:
    citerag.search.filters.checked_tags, citerag.keystore.base.checked_groups)."""
    name = upload_name(name)  # the route checked it already (to name its field); every other caller is held here
    sha = collection.save_original(data)  # before the document exists, so its job always finds the bytes
    accepted = collection.accept(Source(UPLOAD_SCHEME + name, data, name))
    doc = accepted.document
    if doc.sha256 != sha:
        collection.forget_original(sha)
        return Uploaded(doc, True, sha, conflict=True)
    if tags is not None and tags != doc.tags:  # before its job runs: indexing keeps them
        collection.store.set_tags(doc.id, tags)
        doc.tags = list(tags)
    if groups is not None and groups != doc.groups:  # before its job runs, so it is never searched open
        collection.store.set_groups(doc.id, groups)
        doc.groups = list(groups)
    if not accepted.existed:
        jobs.submit(Job(collection.name, doc.id, doc.name, sha))
    return Uploaded(doc, accepted.existed, sha)


def set_tags(collection: Collection, doc: Document, tags: list[str]) -> Document:
    """Replace the document's tags: a new generation, so no cached result of a filtered search outlives them."""
    if not collection.store.set_tags(doc.id, tags):
        raise CiteragError(f"no document {doc.id} in collection {collection.name!r}")
    return collection.document(doc.id) or doc


def set_groups(collection: Collection, doc: Document, groups: list[str]) -> Document:
    """Replace who may read the document, in one transaction and a new generation: the next request after it,
    searches, answers, caches, files, texts and conversations alike, reads with it."""
    if not collection.store.set_groups(doc.id, groups):
        raise CiteragError(f"no document {doc.id} in collection {collection.name!r}")
    return collection.document(doc.id) or doc


def replace(collection: Collection, jobs: IngestQueue, doc: Document, data: bytes) -> str:
    """Queue a new version of `doc` (unless it is the version already indexed); its SHA-256. The old version is
    served until the new one is committed, and stays if it fails."""
    sha = collection.save_original(data)
    if sha != doc.sha256 or doc.status != "indexed":
        previous = jobs.last_submitted(collection.name, doc.id)
        idle = jobs.state(collection.name, doc.id) is None  # asked before this job is queued
        _submit(collection, jobs, Job(collection.name, doc.id, doc.name, sha))
        if previous is not None and idle and previous.sha256 != sha:
            # Nothing was waiting, so the last version submitted has run: unless it is served, it failed and was
            # kept for `retry`, which now takes this one. Its bytes go (another process's record of it included).
            current = collection.document(doc.id)
            if current is not None and current.sha256 != previous.sha256:
                _forget(collection, [previous.sha256])
    return sha


def delete(collection: Collection, jobs: IngestQueue, doc: Document) -> None:
    """Its waiting jobs dropped (a running one finished first), the document deleted, and every version of it
    forgotten: the served one, one committed since `doc` was read, and each replacement submitted for it (waiting,
    cancelled or failed), so that no original outlives its document whatever the order of PUT and DELETE."""
    last = jobs.last_submitted(collection.name, doc.id)
    jobs.cancel(collection.name, doc.id)
    with collection.write_lock:
        current = collection.document(doc.id)  # a replacement may have been committed since `doc` was read
        collection.delete(doc.id)
    versions = [doc.sha256, *collection.unserved.forget(doc.id)]
    versions += [v.sha256 for v in (current, last) if v is not None]
    _forget(collection, versions)


def retry(collection: Collection, jobs: IngestQueue, doc: Document) -> None:
    """Queue `doc` again with the bytes last submitted for it (a failed replacement's, not the served version's)."""
    last = jobs.last_submitted(collection.name, doc.id)
    _submit(collection, jobs, Job(collection.name, doc.id, doc.name, last.sha256 if last else doc.sha256))


def _submit(collection: Collection, jobs: IngestQueue, job: Job) -> None:
    collection.unserved.submitted(job.document_id, job.sha256)  # before the job can run and settle it
    jobs.submit(job)


def _forget(collection: Collection, shas: list[str]) -> None:
    """Remove these originals unless a document still names them or another document's job waits for them."""
    for sha in dict.fromkeys(shas):
        collection.forget_original(sha)


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
        _forget(collection, [job.sha256, *collection.unserved.forget(job.document_id)])  # deleted while queued
        return None
    data = collection.read_original(doc, job.sha256)
    if data is None:
        log.warning("document %s of %s: stored bytes %s missing, left as it is", doc.id, job.collection,
                    job.sha256[:12])
        return None
    lock: AbstractContextManager[Any] = collection.write_lock if serialise else nullcontext()
    with lock:
        before = collection.document(job.document_id)
        if before is None:
            _forget(collection, [job.sha256, *collection.unserved.forget(job.document_id)])
            return None
        outcome = collection.index_document(Source(doc.source_path, data, name=job.name))
        after = collection.document(job.document_id)
        if after is None:  # deleted while it was indexed (a worker does not take the lock): all of it goes
            _forget(collection, [job.sha256, before.sha256, *collection.unserved.forget(job.document_id)])
            return outcome
        # A replacement: the old bytes go once nothing refers to them, and so do the versions submitted before
        # this one (superseded; a failed one among them is no longer what `retry` takes).
        superseded = collection.unserved.settled(job.document_id, job.sha256, served=after.sha256 == job.sha256)
        _forget(collection, [*([before.sha256] if before.sha256 != job.sha256 else []), *superseded])
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
