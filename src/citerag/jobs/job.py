"""A job (one uploaded document to index) and what every queue offers (IngestQueue).

Nothing here knows the application core: a queue runs each job through the handler it was given (`Handler`:
citerag.app.uploads.index_upload in the service and the workers) and hands what the handler returned, untouched,
to `on_finished` (`OnFinished`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Job:
    collection: str
    document_id: int
    name: str  # the file name that picks the extractor (a replacement keeps the document's own)
    sha256: str


Handler = Callable[[Job], Any]
"""What runs one job: its outcome, or None when there was nothing to do. A job whose handler raises
StoreUnavailable ran not at all (the thread queue keeps it journaled for a restart)."""

OnFinished = Callable[[str, Any], None]
"""Told of each job's outcome where this process sees it: the collection's name and what the handler returned
(never None)."""


class IngestQueue(Protocol):
    """What the routes, the metrics and the server's start and stop need from a queue."""

    on_finished: OnFinished | None  # each job's outcome, where this process sees it

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

    def submit_sync(self, collection: str, source: str) -> bool:
        """Queue a sync of the source for any worker: True when queued (or one already waits), False where this
        queue runs no syncs (the caller syncs it itself, citerag.app.syncer)."""
