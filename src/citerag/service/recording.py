"""The audit trail's entries for the service's routes (citerag.audit): who asked what and which documents came back
or were opened, who changed what. A record never fails a request (AuditLog.record swallows and counts its own
failures). A question's words are kept only where the collection keeps trace text (`trace_text`), as its traces
keep them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from citerag.app.collection import Collection
from citerag.audit.base import AuditLog, event
from citerag.keystore.base import Principal
from citerag.types import Answer, SearchResult


def record(audit: AuditLog, who: Principal, action: str, collection: Collection | str | None = None,
           trace_id: str | None = None, documents: Iterable[int] = (), **detail: Any) -> None:
    name = collection.name if isinstance(collection, Collection) else collection
    audit.record(event(who.who, action, name, trace_id, documents, **detail))


def words(collection: Collection, text: str) -> dict[str, str]:
    """The question, as a detail, where the collection keeps its questions' text."""
    return {"question": text} if collection.settings.trace_text else {}


def searched(audit: AuditLog, who: Principal, collection: Collection, query: str, result: SearchResult,
             **detail: Any) -> None:
    record(audit, who, "search", collection, result.trace_id, sorted({h.document.id for h in result.hits}),
           **words(collection, query), **detail)


def answered(audit: AuditLog, who: Principal, action: str, collection: Collection, question: str, answer: Answer,
             **detail: Any) -> None:
    record(audit, who, action, collection, answer.trace_id, sorted({c.document_id for c in answer.citations}),
           refused=answer.refused, **words(collection, question), **detail)


def answering(audit: AuditLog, who: Principal, action: str, collection: Collection, question: str,
              events: Iterator[tuple[str, Any]], **detail: Any) -> Iterator[tuple[str, Any]]:
    """A streamed answer's events, passed through; recorded when its final answer goes by."""
    for kind, value in events:
        if kind == "answer" and isinstance(value, Answer):
            answered(audit, who, action, collection, question, value, **detail)
        yield kind, value
