"""Originals beside a sqlite store: INDEX/files/<sha256>, one file per distinct upload (one machine)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from citerag.errors import FULL, READ_ONLY, StoreUnavailable
from citerag.store.base import Store

# The machine's failures, not the upload's: a full disk or quota, a read-only or failing file system.
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}


class FolderOriginals:
    """`folder` is INDEX/files (citerag.backends.sqlite); `store` is the collection's, which says what is still
    referred to."""

    def __init__(self, folder: Path, store: Store) -> None:
        self.folder = folder
        self.store = store

    def save(self, sha256: str, data: bytes) -> None:
        path = self.folder / sha256
        if path.exists():
            return
        tmp: str | None = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            # A name of its own per writer: two uploads of the same bytes at once must not share a temporary file.
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{sha256}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # complete or absent, never half written
        except OSError as exc:
            if tmp is not None:  # a full disk stops the write half way: no half-written file stays behind
                Path(tmp).unlink(missing_ok=True)
            if exc.errno in _ENVIRONMENT_ERRNOS:
                cause = {errno.ENOSPC: FULL, errno.EDQUOT: FULL, errno.EROFS: READ_ONLY}.get(exc.errno)
                raise StoreUnavailable(f"cannot store the upload in {self.folder}: {exc.strerror}", cause) from exc
            raise

    def read(self, sha256: str) -> bytes | None:
        try:
            return (self.folder / sha256).read_bytes()
        except OSError:
            return None

    def remove_unreferenced(self, sha256: str) -> None:
        if any(d.sha256 == sha256 for d in self.store.documents()):
            return
        (self.folder / sha256).unlink(missing_ok=True)
