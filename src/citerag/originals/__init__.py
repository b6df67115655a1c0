"""The original bytes of each document, so that a citation can open the source itself and a queue worker on any
machine can index an upload.

Uploads are content-addressed (a name a client chose never becomes a path or a key) and kept by a backend that
matches the collection's store (citerag.backends picks it): beside a sqlite store as files/<sha256> (folder.py),
in the store's own database for a PostgreSQL store (postgres.py, the `originals` table), so every API process and
worker sees the same bytes. A document the CLI ingested from disk is read from its path, and only while the file
still has the bytes that were indexed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from citerag.originals.base import Originals
from citerag.types import SOURCE_SCHEME, UPLOAD_SCHEME, Document


def save_original(originals: Originals, data: bytes) -> str:
    """Keep an upload's bytes; their SHA-256 (what a job and the document name them by)."""
    sha = hashlib.sha256(data).hexdigest()
    originals.save(sha, data)
    return sha


def read_original(originals: Originals, doc: Document, sha256: str | None = None) -> bytes | None:
    """The bytes with hash `sha256` (default: the indexed version's), or None when they are no longer there."""
    sha = sha256 or doc.sha256
    if doc.source_path.startswith((UPLOAD_SCHEME, SOURCE_SCHEME)):
        return originals.read(sha)  # stored under its hash, written whole
    try:
        data = Path(doc.source_path).read_bytes()
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha else None  # a file on disk may have changed
