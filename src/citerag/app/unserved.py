"""The uploaded versions of each document that no document row names yet: a replacement waiting for its job,
being indexed, or failed (kept for `retry`). Originals are content-addressed and a row names only the served
version, so without this record a replacement's bytes outlive the document when it is deleted, and a failed
replacement's bytes outlive the next one (issue 25). What this process submitted, in order, per document.

Only this process's submissions are here: citerag.app.uploads also asks the queue for the last job submitted
and reads the document again, so the cases that cross processes (a worker, a restart) are covered too."""

from __future__ import annotations

import threading


class Unserved:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_document: dict[int, list[str]] = {}  # oldest first

    def submitted(self, document_id: int, sha256: str) -> None:
        """A job for these bytes was queued (again: it moves to the end)."""
        with self._lock:
            shas = self._by_document.setdefault(document_id, [])
            if sha256 in shas:
                shas.remove(sha256)
            shas.append(sha256)

    def settled(self, document_id: int, sha256: str, *, served: bool) -> list[str]:
        """The job for `sha256` ended: the versions submitted before it, which nothing will index now (a later
        job supersedes them, and `retry` takes the last one), leave the record and are returned to be removed.
        `sha256` itself leaves it when it is served (its row names it now); a failed one stays for retry."""
        with self._lock:
            shas = self._by_document.get(document_id, [])
            if sha256 not in shas:
                return []
            at = shas.index(sha256)
            older, kept = shas[:at], shas[at + 1:] if served else shas[at:]
            self._set(document_id, kept)
            return older

    def forget(self, document_id: int) -> list[str]:
        """The document was deleted: every version submitted for it, to be removed."""
        with self._lock:
            return self._by_document.pop(document_id, [])

    def holds(self, sha256: str) -> bool:
        """Some document still waits for these bytes (the same file may be another document's replacement)."""
        with self._lock:
            return any(sha256 in shas for shas in self._by_document.values())

    def _set(self, document_id: int, shas: list[str]) -> None:
        if shas:
            self._by_document[document_id] = shas
        else:
            self._by_document.pop(document_id, None)
