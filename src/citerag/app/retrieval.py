"""A retriever over one store view of a collection, with the indexes as of that view and the filters resolved
against it: what the question path (query.py) and the refusal rule's fit (signals.py) search with."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from citerag.app.models import EmptyCollection, RefusalStatus
from citerag.app.shared import Shared
from citerag.embed.fused import ranking_vector
from citerag.index.base import Allowed, SearchBackend
from citerag.lang import detect
from citerag.search import Retriever
from citerag.search.filters import Filters
from citerag.settings import Settings
from citerag.store.base import Store, StoreView
from citerag.trace.setup import Sink

log = logging.getLogger("citerag")


class Host(Protocol):
    """What the question path needs of its collection (citerag.app.collection.Collection)."""

    name: str
    settings: Settings
    store: Store
    search_backend: SearchBackend
    app: Shared

    @property
    def location(self) -> str: ...

    def refusal_status(self, settings: Settings) -> RefusalStatus: ...

    def persist_indexes(self) -> None: ...

    def trace_sink(self, settings: Settings | None, texts: dict[str, str] | None = None,
                   filters: dict[str, Any] | None = None) -> Sink | None: ...


@contextmanager
def open_retriever(host: Host, embed: Callable[[str], np.ndarray] | None = None,
                   filters: Filters | None = None) -> Iterator[Retriever]:
    """A retriever over indexes as of one store view; hits and texts come from that view. The view is opened
    inside the backend's read lock, so it is never older than the indexes it is searched with; `filters` are
    resolved against the same view."""
    model = host.settings.embedding_model
    rebuilt = False
    with host.search_backend.reading(), host.store.view() as view, host.search_backend.open(view) as indexes:
        rebuilt = indexes.applied < 0
        if indexes.applied and (excluded := view.excluded_documents(model)):
            log.warning("%d document(s) indexed with another embedding model are not searched; run "
                        "`citerag reindex --stale`", excluded)
        if indexes.empty:
            if view.excluded_documents(model):
                raise EmptyCollection(f"no documents in {host.location} were indexed with {model}: "
                                      "run `citerag reindex --stale`")
            raise EmptyCollection(f"the index at {host.location} has no indexed documents: "
                                  "run `citerag ingest PATH` first")
        s = host.settings
        yield Retriever(indexes.vector, indexes.lexical, view,
                        embed or (lambda q: host.app.query_vector(model, q, s.cache_url, s.cache_query_ttl)),
                        rrf_k=s.rrf_k, lexical_weight=s.lexical_weight,
                        rank_vector=lambda q, v: ranking_vector(model, v, detect(q)),
                        allowed=_allowed(host, view, filters) if filters else None)
    if rebuilt:  # built from the whole store: save it so that the next process need not
        host.persist_indexes()


def _allowed(host: Host, view: StoreView, filters: Filters) -> Allowed | None:
    """The filters resolved against the view, once per generation of the collection (every change, a document's
    groups included, moves it)."""
    key = (host.settings.store_url, host.location, host.name, view.generation, filters)
    found: Allowed | None = host.app.resolved(key, lambda: filters.resolve(view))
    return found
