"""The original bytes of each document, so that a citation can open the source itself and a queue worker on any
machine can index an upload.

Uploads are content-addressed (a name a client chose never becomes a path or a key) and kept by a backend that
matches the collection's store: beside a sqlite store as files/<sha256> (folder.py), in the store's own database
for a PostgreSQL store (postgres.py, the `originals` table), so every API process and worker sees the same bytes.
A document the CLI ingested from disk is read from its path, and only while the file still has the bytes that
were indexed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from citerag.types import Document

if TYPE_CHECKING:  # the application core uses these: imported for types only
    from citerag.app import Collection

UPLOAD_SCHEME = "upload:"


class Originals(Protocol):
    """One collection's uploaded originals, by SHA-256."""

    def save(self, sha256: str, data: bytes) -> None:
        """Keep `data` under its hash; complete or absent, never half written; saving it again is harmless."""

    def read(self, sha256: str) -> bytes | None:
        """The bytes under `sha256`, or None when they are not there."""

    def remove_unreferenced(self, sha256: str) -> None:
        """Remove the bytes unless a document of the collection still has this hash."""


def originals(collection: Collection) -> Originals:
    """The backend for the collection's store (its settings' store_scheme)."""
    if collection.settings.store_scheme == "postgresql":
        from citerag.originals.postgres import PostgresOriginals

        return PostgresOriginals.of(collection)
    from citerag.originals.folder import FolderOriginals

    return FolderOriginals.of(collection)


def save_original(collection: Collection, data: bytes) -> str:
    """Keep an upload's bytes; their SHA-256 (what a job and the document name them by)."""
    sha = hashlib.sha256(data).hexdigest()
    originals(collection).save(sha, data)
    return sha


def read_original(collection: Collection, doc: Document, sha256: str | None = None) -> bytes | None:
    """The bytes with hash `sha256` (default: the indexed version's), or None when they are no longer there."""
    sha = sha256 or doc.sha256
    if doc.source_path.startswith(UPLOAD_SCHEME):
        return originals(collection).read(sha)  # stored under its hash, written whole
    try:
        data = Path(doc.source_path).read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha else None  # a file on disk may have changed


def forget_original(collection: Collection, sha256: str) -> None:
    """Remove stored bytes no document of the collection refers to any more."""
    originals(collection).remove_unreferenced(sha256)


__all__ = ["UPLOAD_SCHEME", "Originals", "forget_original", "originals", "read_original", "save_original"]
