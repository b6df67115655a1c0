"""The embedded store's search indexes: files beside the store (`INDEX/search/`), loaded once per process,
caught up per document from the store's change log before each search, saved after each write (see sync.py).
An HNSW graph built in the background (hnsw_build.py) is adopted by a save as soon as it is done, from the
build's thread, and `close` waits for one still running, so that a short-lived process does not lose it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from citerag.errors import StoreUnavailable
from citerag.index import hnsw_build
from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import SearchPair
from citerag.index.sync import IndexLockTimeout, SearchIndexes, index_dir, load, persist
from citerag.store.base import Store, StoreView

log = logging.getLogger(__name__)


class LocalSearch:
    def __init__(self, root: Path, embedding_model: str, vector_index: str, analyzer: Analyzer = REFERENCE) -> None:
        self.directory = index_dir(root, embedding_model, vector_index)
        self.embedding_model, self.vector_index = embedding_model, vector_index
        self.analyzer = analyzer
        self.indexes: SearchIndexes | None = None  # loaded on first use
        # Re-entrant: a search holds it from before its view is opened (reading) through open() and its use.
        self._lock = threading.RLock()
        self._store: Store | None = None  # the last one saved against: a finished graph build saves with it

    def _loaded(self) -> SearchIndexes:
        if self.indexes is None:
            self.indexes = load(self.directory, self.embedding_model, self.vector_index, self.analyzer)
        return self.indexes

    def reading(self) -> threading.RLock:
        # Without it a thread's view, opened while another thread caught the shared indexes up to a newer commit,
        # would be older than the indexes: they would return chunks the view does not have.
        return self._lock

    @contextmanager
    def open(self, view: StoreView) -> Iterator[SearchPair]:
        """The indexes caught up to the view. One search at a time: catching up mutates the indexes, and a scan
        takes milliseconds."""
        with self._lock:
            indexes = self._loaded()
            applied = indexes.catch_up(view)
            yield SearchPair(indexes.vector, indexes.lexical, empty=not len(indexes), applied=applied)

    def persist(self, store: Store) -> None:
        """Save the indexes at the store's generation, so the next process opens them without rebuilding.

        A failure here loses nothing (the store has committed, and any process catches up from its change log),
        so it is logged, not raised."""
        with self._lock:
            self._store = store
            try:
                self.indexes = persist(self._loaded(), store)
                # A graph build running now is adopted when it ends; one that ended just now, at once.
                if not hnsw_build.when_done(self.directory, self._built) and self.indexes.graph_work():
                    self.indexes = persist(self.indexes, store)
            except (OSError, IndexLockTimeout, StoreUnavailable) as exc:
                # A failed save may have left the indexes in memory naming files it wrote and then removed:
                # the next use loads the saved state again and catches up from the store.
                self.indexes = None
                log.warning("search indexes in %s not saved (%s): they catch up from the store instead",
                            self.directory, getattr(exc, "strerror", None) or exc)

    def _built(self, build: hnsw_build.GraphBuild) -> None:
        """In the build's thread, once it ended: save, which adopts the graph (holding the lock only that long)."""
        store = self._store
        if store is None or build.state != hnsw_build.DONE:
            return
        try:
            self.persist(store)
        except Exception as exc:  # e.g. the store closed meanwhile: the next save here, or the next process, builds
            log.warning("HNSW graph built in %s not adopted (%s)", self.directory, exc)

    def close(self, store: Store) -> None:
        """Wait for this directory's graph build, if one runs, and save what it made (not holding the lock, which
        the build's own save takes): a short-lived process otherwise exits without it."""
        build = hnsw_build.current(self.directory)
        if build is None:
            return
        build.wait()
        if build.state == hnsw_build.DONE:  # a failed one is retried by the next process's save, not here
            self.persist(store)
