"""A folder source: every supported file under a folder (hidden ones and links out of it left alone), changed when
its size or modification time moved and then only if its bytes did (a `touch` re-reads a file, never re-embeds it).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from citerag.extract import supported_suffixes
from citerag.globs import matches
from citerag.sources.base import Change, Failed, Fetched, Known, Unchanged, Unreachable


class FolderSource:
    def __init__(self, root: Path, *, globs: Sequence[str] = (), max_bytes: int = 20_000_000) -> None:
        self.root = root
        self.globs = list(globs)
        self.max_bytes = max_bytes
        self.complete = False
        self.fetched_paths: list[str] = []

    def _files(self) -> Iterator[tuple[str, Path]]:
        suffixes = set(supported_suffixes())
        root = self.root.resolve()
        for folder, dirs, files in os.walk(root):  # links to folders are not entered (os.walk's default)
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(files):
                path = Path(folder, name)
                key = path.relative_to(root).as_posix()
                if name.startswith(".") or path.suffix.lower() not in suffixes:
                    continue
                if self.globs and not matches(key, self.globs):
                    continue
                if path.is_symlink() and not path.resolve().is_relative_to(root):
                    continue  # what a link leads to outside the folder is not its owner's to index
                yield key, path

    def scan(self, known: Mapping[str, Known]) -> Iterator[Change]:
        self.complete = False
        self.fetched_paths = []
        if not self.root.is_dir():
            raise Unreachable(f"the folder {self.root} is not there (or not a folder)")
        for key, path in self._files():
            try:
                st = path.stat()
                stat_part = f"{st.st_mtime_ns}:{st.st_size}"
                old = known.get(key)
                old_stat, _, old_sha = old.token.rpartition(":") if old else ("", "", "")
                if old and old_stat == stat_part:
                    yield Unchanged(key, old.token)
                    continue
                if st.st_size > self.max_bytes:
                    yield Failed(key, f"larger than {self.max_bytes} bytes")
                    continue
                data = path.read_bytes()
            except OSError as exc:  # removed or unreadable between the listing and the read
                if path.exists():
                    yield Failed(key, f"cannot read {key}: {exc.strerror}")
                continue
            self.fetched_paths.append(key)
            sha = hashlib.sha256(data).hexdigest()
            token = f"{stat_part}:{sha}"
            if old and old_sha == sha:
                yield Unchanged(key, token)
            else:
                yield Fetched(key, token, path.name, data, link="", origin=str(path))
        self.complete = True


def fingerprint(root: str) -> str:
    """The folder's file names, sizes and modification times as one hash: what a watch compares between looks
    (no file is read)."""
    h = hashlib.sha256()
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            try:
                st = os.stat(os.path.join(folder, name))
            except OSError:
                continue
            h.update(f"{folder}/{name}\0{st.st_mtime_ns}\0{st.st_size}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()
