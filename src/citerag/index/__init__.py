"""Search indexes: vectors (exact, HNSW) and BM25 postings, beside an embedded store (files, caught up per document)
or inside a server store (tables, written in the store's transaction). `open_search` picks them for a collection."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from citerag.index.base import SearchBackend
    from citerag.settings import Settings


def open_search(settings: Settings) -> SearchBackend:
    """The factory: the search indexes that go with the settings' store, tokenising as `settings.lexical` says."""
    from citerag.search.analyzer import Analyzer

    if settings.store_scheme == "postgresql":
        from citerag.index.pg_search import DatabaseSearch

        return DatabaseSearch(settings.embedding_model, settings.vector_index, Analyzer(settings.lexical))
    from citerag.index.local import LocalSearch

    return LocalSearch(settings.sqlite_dir, settings.embedding_model, settings.vector_index,
                       Analyzer(settings.lexical))
