"""Originals beside a sqlite store: INDEX/files/<sha256>, one file per distinct upload (one machine)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from citerag.app import Collection


class FolderOriginals:
    def __init__(self, folder: Path, collection: Collection) -> None:
        self.folder = folder
        self.collection = collection

    @classmethod
    def of(cls, collection: Collection) -> FolderOriginals:
        return cls(collection.settings.sqlite_dir / "files", collection)

    def save(self, sha256: str, data: bytes) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / sha256
        if path.exists():
            return
        # A name of its own per writer: two uploads of the same bytes at once must not share a temporary file.
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{sha256}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)  # complete or absent, never half written

    def read(self, sha256: str) -> bytes | None:
        try:
            return (self.folder / sha256).read_bytes()
        except OSError:
            return None

    def remove_unreferenced(self, sha256: str) -> None:
        if any(d.sha256 == sha256 for d in self.collection.documents()):
            return
        (self.folder / sha256).unlink(missing_ok=True)
