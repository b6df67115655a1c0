"""The original bytes of each document, so that a citation can open the source itself.

Uploads are kept under the collection's folder as files/<sha256> (content-addressed: a name a client chose never
becomes a path). A document the CLI ingested from disk is read from its path, and only while the file still has
the bytes that were indexed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from citerag.app import Collection
from citerag.types import Document

UPLOAD_SCHEME = "upload:"


def _folder(collection: Collection) -> Path:
    return collection.settings.sqlite_dir / "files"


def save_original(collection: Collection, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    folder = _folder(collection)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / sha
    if not path.exists():
        # A name of its own per writer: two uploads of the same bytes at once must not share a temporary file.
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{sha}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # complete or absent, never half written
    return sha


def read_original(collection: Collection, doc: Document, sha256: str | None = None) -> bytes | None:
    """The bytes with hash `sha256` (default: the indexed version's), or None when they are no longer there."""
    sha = sha256 or doc.sha256
    uploaded = doc.source_path.startswith(UPLOAD_SCHEME)
    path = _folder(collection) / sha if uploaded else Path(doc.source_path)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    # An upload's file is named by its hash and written whole (save_original); a file on disk may have changed.
    return data if uploaded or hashlib.sha256(data).hexdigest() == sha else None


def forget_original(collection: Collection, sha256: str) -> None:
    """Remove stored bytes no document of the collection refers to any more."""
    if any(d.sha256 == sha256 for d in collection.documents()):
        return
    (_folder(collection) / sha256).unlink(missing_ok=True)
