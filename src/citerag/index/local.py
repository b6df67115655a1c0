"""The embedded store's search indexes: files beside the store (`INDEX/search/`), loaded once per process,
caught up per document from the store's change log before each search, saved after each write (see sync.py)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from citerag.errors import StoreUnavailable
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
            try:
                self.indexes = persist(self._loaded(), store)
            except (OSError, IndexLockTimeout, StoreUnavailable) as exc:
                # A failed save may have left the indexes in memory naming files it wrote and then removed:
                # the next use loads the saved state again and catches up from the store.
                self.indexes = None
                log.warning("search indexes in %s not saved (%s): they catch up from the store instead",
                            self.directory, getattr(exc, "strerror", None) or exc)
