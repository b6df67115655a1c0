"""Collections of an embedded (SQLite) home: the home collection is the index folder itself (what the CLI's
`--index DIR` ingests into), every other one a folder under HOME/collections/ with its own store and its own
config.toml (threshold, strategy, mode...). Creating a collection writes its settings; deleting one removes its
folder.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import Any

from citerag.catalog.base import check_changes, check_collection_name, is_collection_name
from citerag.config_file import set_in_config_file
from citerag.errors import CiteragError
from citerag.settings import CONFIG_NAME, Settings, load_settings, sqlite_url


class FolderCatalog:
    def __init__(self, home: Settings) -> None:
        self.home = home
        self.root = home.index_dir.expanduser().resolve() / "collections"

    def names(self) -> list[str]:
        # Only folders a name could make: a staging folder of a create under way (".new-...") is not a collection.
        others = sorted(p.name for p in self.root.iterdir() if is_collection_name(p.name)
                        and (p / CONFIG_NAME).is_file()) if self.root.is_dir() else []
        return [self.home.collection, *(n for n in others if n != self.home.collection)]

    def exists(self, name: str) -> bool:
        return name in self.names()

    def settings(self, name: str) -> Settings:
        if name == self.home.collection:
            return self.home
        if not self.exists(name):
            raise CiteragError(f"no collection {name!r}")
        # Each collection its own store: a CITERAG_STORE_URL meant for the home collection must not apply here.
        return load_settings(self.root / name, collection=name, store_url=sqlite_url(self.root / name))

    def create(self, name: str, changes: dict[str, Any]) -> Settings:
        check_collection_name(name)  # before the name is joined to any path
        if self.exists(name):
            raise CiteragError(f"collection {name!r} already exists")
        check_changes(self.home, name, changes)
        # Written whole in a staging folder, then renamed into place: a create that fails at any step leaves
        # neither a file nor a folder, and no other process ever sees a collection half made.
        made_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=self.root, prefix=".new-"))
        folder = self.root / name
        try:
            # config.toml marks the folder as a collection; the store itself is created when it is first opened.
            set_in_config_file(staging, "collection", name)
            for key, value in changes.items():
                set_in_config_file(staging, key, value)
            self._move_into_place(staging, folder, name)
            return self.settings(name)
        except BaseException:
            if not staging.exists():  # it was moved: the collection is this create's own, undone whole
                shutil.rmtree(folder, ignore_errors=True)
            shutil.rmtree(staging, ignore_errors=True)
            if made_root:
                with suppress(OSError):  # removed only if empty: another collection may have been made meanwhile
                    self.root.rmdir()
            raise

    @staticmethod
    def _move_into_place(staging: Path, folder: Path, name: str) -> None:
        """Rename the staging folder to the collection's; another process that made it first wins."""
        if (folder / CONFIG_NAME).exists():
            raise CiteragError(f"collection {name!r} already exists")
        if folder.exists():
            # What a deletion interrupted half way left (its marker goes first): finished now, so that the new
            # collection never takes over the old one's store and originals.
            shutil.rmtree(folder, ignore_errors=True)
        try:
            # rename(2) fails on a folder that is not empty: another process made the collection meanwhile.
            os.rename(staging, folder)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise CiteragError(f"collection {name!r} already exists") from None
            raise

    def close(self) -> None:
        """Nothing held open: every call reads the folders."""

    def identity(self, name: str) -> object | None:
        """The config file's inode: a folder deleted and made again gets a new one."""
        if not self.exists(name):
            return None
        folder = self.home.index_dir.expanduser().resolve() if name == self.home.collection else self.root / name
        try:
            return (folder / CONFIG_NAME).stat().st_ino if name != self.home.collection else "home"
        except FileNotFoundError:
            return None

    def delete(self, name: str) -> None:
        if name == self.home.collection:
            raise CiteragError(f"the home collection {name!r} cannot be deleted (it is the index folder itself)")
        if not self.exists(name):
            raise CiteragError(f"no collection {name!r}")
        # The marker goes first, so a deletion interrupted half way leaves no collection that looks alive.
        (self.root / name / CONFIG_NAME).unlink()
        shutil.rmtree(self.root / name, ignore_errors=True)
