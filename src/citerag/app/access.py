"""Who may read which documents (issue 30), for every route that is not a question: a question's search applies the
same rule inside each index (Filters.audience, citerag.app.retrieval). `audience` is the caller's groups
(citerag.keystore.base.Principal.audience); None reads every document. A document a caller may not read is, on every
route, exactly a document that does not exist: its id, name, title, text and chunk count never reach the caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.types import Document, Turn, readable_by

WITHHELD = "(withheld: this answer cites a document you may not read)"


class NotReadable(CiteragError):
    """A document this caller may not read, told as one that does not exist."""


def documents(collection: Collection, audience: frozenset[str] | None) -> list[Document]:
    return [d for d in collection.documents() if readable_by(d.groups, audience)]


def document(collection: Collection, document_id: int, audience: frozenset[str] | None) -> Document:
    """The document, or NotReadable, whether it does not exist or may not be read (the same message)."""
    found = collection.document(document_id)
    if found is None or not readable_by(found.groups, audience):
        raise NotReadable(f"no document {document_id} in collection {collection.name!r}")
    return found


def hidden_ids(collection: Collection, audience: frozenset[str] | None) -> set[int]:
    """The ids of the documents this caller may not read (none for an admin): what stored citations, traces and
    labels are checked against. Deleted documents are not among them: their ids are never given again."""
    if audience is None:
        return set()
    return {d.id for d in collection.documents() if not readable_by(d.groups, audience)}


def turns(collection: Collection, stored: Sequence[Turn], audience: frozenset[str] | None) -> list[Turn]:
    """A conversation's turns as this caller may read them now: a turn that cited a document it may no longer read
    keeps its question, and loses its answer, citations and query (a follow-up's query was rewritten from earlier
    turns' sections). What the next follow-up is rewritten from, too."""
    hidden = hidden_ids(collection, audience)
    if not hidden:
        return list(stored)
    return [dataclasses.replace(t, answer=WITHHELD, citations=[], query=t.question)
            if any(c.get("document_id") in hidden for c in t.citations) else t for t in stored]


def trace_documents(record: Any) -> Iterator[int]:
    """Every document id a kept trace names (its spans' `*.document_ids`, a label's or feedback's `document_id`)."""
    if isinstance(record, dict):
        for key, value in record.items():
            if key.endswith("document_ids") and isinstance(value, list):
                yield from (v for v in value if isinstance(v, int))
            elif key.endswith("document_id") and isinstance(value, int):
                yield value
            else:
                yield from trace_documents(value)
    elif isinstance(record, list):
        for item in record:
            yield from trace_documents(item)


def names_only_readable(collection: Collection, ids: Iterable[int], audience: frozenset[str] | None) -> bool:
    """Whether every one of these document ids is one this caller may read (or no longer exists)."""
    hidden = hidden_ids(collection, audience)
    return not hidden or hidden.isdisjoint(ids)


def restrict_first(collection: Collection, uri: str, name: str, sha256: str, groups: list[str]) -> None:
    """Give the document at `uri` these groups before a version of it is indexed (a source's rules): a new one is
    made pending first, so its text is never searchable by everyone, not even for a moment."""
    held = collection.store.document_by_path(uri)
    doc_id = held.id if held else collection.store.add_pending(uri, name, sha256)
    if held is None or held.groups != groups:
        collection.store.set_groups(doc_id, groups)
