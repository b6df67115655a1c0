"""A collection's search indexes: open, catch up with the store, persist, for one embedding model.

Layout: `DIR/manifest.json` names the files of the current state and the store generation it reflects; every
file is written once under a new name and the manifest is replaced atomically, so a reader that loaded one
manifest keeps a consistent set of files whatever a writer does next. Writers hold `DIR/lock` (filelock) while
they save. A process whose indexes lag the store (another process ingested) catches up in memory from the
store's change log, document by document; it rebuilds only when the log does not reach back far enough, or when
the saved lexical index was built with another tokenisation than the settings' `lexical` (its state names it).
"""

from __future__ import annotations

import json
import logging
import os
import re
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock
from filelock import Timeout as IndexLockTimeout

from citerag.index import hnsw_build
from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import LexicalIndex, VectorIndex
from citerag.index.bm25 import Bm25Index
from citerag.index.exact import ExactIndex
from citerag.index.files import new_name
from citerag.index.hnsw import HnswIndex
from citerag.store.base import Store, StoreView

log = logging.getLogger(__name__)

__all__ = ["IndexLockTimeout", "SearchIndexes", "index_dir", "load", "persist"]

FORMAT = 1
LOCK_TIMEOUT_S = 300.0  # a writer saving a million-chunk graph holds the lock for minutes at most
MANIFEST = "manifest.json"
_VECTOR_TYPES: dict[str, Any] = {"exact": ExactIndex, "hnsw": HnswIndex}


def index_dir(root: Path, embedding_model: str, vector_index: str) -> Path:
    """Where a collection keeps the indexes of one embedding model and vector index kind."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", embedding_model).strip("_") or "model"
    return root / "search" / f"{slug}-{vector_index}"


def _new_vector_index(kind: str, dim: int) -> VectorIndex:
    exact = ExactIndex(dim)
    return HnswIndex(exact) if kind == "hnsw" else exact


@dataclass
class SearchIndexes:
    """The vector and lexical index of one collection at one store generation (-1: nothing indexed yet)."""

    directory: Path
    embedding_model: str
    vector_kind: str
    vector: VectorIndex | None = None  # None until the first vector says its dimension
    lexical: LexicalIndex = field(default_factory=Bm25Index)
    generation: int = -1
    token: str | None = None  # the manifest this state was loaded from or saved as
    analyzer: Analyzer = REFERENCE  # the lexical index's tokenisation

    def __post_init__(self) -> None:
        if self.generation < 0 and not len(self.lexical):
            self.lexical = Bm25Index(analyzer=self.analyzer)

    def catch_up(self, view: StoreView) -> int:
        """Bring both indexes to the view's generation; the number of documents re-read (all on a rebuild)."""
        if self.generation == view.generation:
            return 0
        if view.generation < self.generation:  # indexes cannot go back: the caller opens its view too early
            raise RuntimeError(f"store view at generation {view.generation} is older than the search indexes "
                               f"({self.generation}): open the view inside SearchBackend.reading()")
        changed = view.changed_documents(self.generation) if self.generation >= 0 else None
        if changed is None:
            self.vector, self.lexical = None, Bm25Index(analyzer=self.analyzer)
            batches = view.indexed_chunks(self.embedding_model)
        else:
            if self.vector is not None:
                self.vector.remove_documents(changed)
            self.lexical.remove_documents(changed)
            batches = view.indexed_chunks(self.embedding_model, changed) if changed else iter(())
        for batch in batches:
            if self.vector is None:
                self.vector = _new_vector_index(self.vector_kind, batch.vectors.shape[1])
            self.vector.add(batch)
            self.lexical.add(batch)
        self.generation = view.generation
        return -1 if changed is None else len(changed)

    def __len__(self) -> int:
        return len(self.vector) if self.vector is not None else 0

    def graph_work(self) -> bool:
        """Whether saving would adopt a finished HNSW graph or start one that is due (hnsw_build.py): a save then
        has work even with nothing new from the store."""
        return isinstance(self.vector, HnswIndex) and self.vector.work_due(self.directory)

    def save(self) -> None:
        """Write this state and point the manifest at it (the caller holds the lock)."""
        state = {"format": FORMAT, "generation": self.generation, "embedding_model": self.embedding_model,
                 "vector_kind": self.vector_kind,
                 "vector": self.vector.save(self.directory) if self.vector is not None else None,
                 "lexical": self.lexical.save(self.directory)}
        token = new_name("manifest")
        state["token"] = token
        tmp = self.directory / f"{MANIFEST}.{token}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / MANIFEST)
        self.token = token
        _remove_unnamed(self.directory, state)
        hnsw_build.launch(self.directory)  # a graph build the vector index's save staged


def _files(state: dict[str, Any]) -> set[str]:
    names = Bm25Index.files(state["lexical"]) | {MANIFEST, "lock"}
    if state["vector"] is not None:
        names |= _VECTOR_TYPES[state["vector_kind"]].files(state["vector"])
    return names


def _remove_unnamed(directory: Path, state: dict[str, Any] | None) -> None:
    """Delete files no manifest names any more (all but the manifest and the lock when there is none). A reader
    that mapped them keeps them until it unmaps (POSIX); one that read the old manifest but had not opened them yet
    retries with the new one (`load`)."""
    keep = _files(state) if state is not None else {MANIFEST, "lock"}
    for path in directory.iterdir():
        if path.name.startswith(hnsw_build.BUILD_PREFIX) and not hnsw_build.stale(path):
            continue  # a graph some live process is building or has built, not adopted yet
        if path.name not in keep:
            if path.is_dir():
                for child in path.iterdir():
                    child.unlink(missing_ok=True)
                path.rmdir()
            else:
                path.unlink(missing_ok=True)


def _read_manifest(directory: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("search index manifest at %s unreadable (%s): rebuilding from the store", directory, exc)
        return None
    return state if state.get("format") == FORMAT else None


def load(directory: Path, embedding_model: str, vector_kind: str, analyzer: Analyzer = REFERENCE) -> SearchIndexes:
    """The saved state, or an empty one (which catches up by a full build) when there is none, or when its lexical
    index was built with another tokenisation than `analyzer`."""
    empty = SearchIndexes(directory, embedding_model, vector_kind, analyzer=analyzer)
    for _attempt in range(5):
        state = _read_manifest(directory)
        if state is None:
            return empty
        try:
            vector = None if state["vector"] is None else \
                _VECTOR_TYPES[state["vector_kind"]].load(directory, state["vector"])
            lexical = Bm25Index.load(directory, state["lexical"], analyzer)
        except FileNotFoundError:
            continue  # a writer replaced the manifest and removed these files meanwhile: read the new one
        except (OSError, ValueError, KeyError) as exc:
            log.warning("search index at %s unreadable (%s): rebuilding from the store", directory, exc)
            return empty
        return SearchIndexes(directory, embedding_model, vector_kind, vector, lexical, int(state["generation"]),
                             state.get("token"), analyzer)
    return empty


def persist(current: SearchIndexes, store: Store) -> SearchIndexes:
    """Save the indexes at the store's current generation; what to search from now on.

    If another process saved since `current` was loaded, its state is the base (appending to files it named is
    only safe on top of the newest manifest); either way the result has caught up with the store.
    """
    directory = current.directory
    on_disk = _read_manifest(directory)
    if on_disk is not None and on_disk.get("token") == current.token and \
            current.generation == on_disk.get("generation") == store.generation() and not current.graph_work():
        return current  # saved already: no lock file either, so an index on a read-only mount is left as it is
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(directory / "lock", timeout=LOCK_TIMEOUT_S):
        on_disk = _read_manifest(directory)
        if on_disk is not None and on_disk.get("token") != current.token:
            current = load(directory, current.embedding_model, current.vector_kind, current.analyzer)
        elif on_disk is None and current.token is not None:
            current = SearchIndexes(directory, current.embedding_model, current.vector_kind, analyzer=current.analyzer)
        with store.view() as view:
            current.catch_up(view)
        if on_disk is None or on_disk.get("generation") != current.generation or current.token is None or \
                current.graph_work():
            try:
                current.save()
            except BaseException:
                # A save cut short (a full disk) leaves files no manifest names: remove them now, under the lock
                # no other writer holds, or every later attempt on a disk short of room leaves more of them. The
                # caller drops `current`, which may name them.
                with suppress(OSError):
                    _remove_unnamed(directory, _read_manifest(directory))
                raise
    return current
