"""Citations of a source's documents get where the document lives (Citation.live_url): a web page's final URL, a
Git file's forge page at the commit it was read at. Put on each result as it leaves the collection, from the
source's records (one read, and only when a source's document is cited), so a cached answer gets them too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from citerag.store import Store
from citerag.types import SOURCE_SCHEME, Answer, Citation, SearchResult


def linked(store: Store, citations: list[Citation]) -> list[Citation]:
    ids = {c.document_id for c in citations if c.source_path.startswith(SOURCE_SCHEME)}
    if not ids:
        return citations
    links = {i: r.link for i, r in store.source_records(ids).items() if r.link}
    return [replace(c, live_url=links[c.document_id]) if c.document_id in links else c for c in citations]


def result(store: Store, found: SearchResult) -> SearchResult:
    return replace(found, citations=linked(store, found.citations))


def events(store: Store, stream: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    for kind, value in stream:
        if kind == "citation":
            value = linked(store, [value])[0]
        elif kind == "answer" and isinstance(value, Answer):
            value = replace(value, citations=linked(store, value.citations))
        yield kind, value
