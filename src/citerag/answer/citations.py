"""The server owns every link: [n] maps to a citation built from the store, never from model text."""

from __future__ import annotations

from collections.abc import Callable

from citerag.types import Citation, Hit


def locator_label(hit: Hit) -> str:
    return hit.chunk.section or hit.document.title or hit.document.name


def fragment(start: int, end: int) -> str:
    return f"#char={start},{end}"  # RFC 5147 text fragment


def cite(hits: list[Hit], canonical_text: Callable[[int], str]) -> list[Citation]:
    """Number the hits [1..n]; each quote is the chunk's content and is checked against the document."""
    citations: list[Citation] = []
    texts: dict[int, str] = {}
    for hit in hits:
        c = hit.chunk
        if c.document_id not in texts:
            texts[c.document_id] = canonical_text(c.document_id)
        if texts[c.document_id][c.start:c.end] != c.content:
            raise AssertionError(f"chunk {c.id} does not match its document's text at {c.start}:{c.end}")
        citations.append(Citation(
            index=len(citations) + 1, document_id=c.document_id, document_name=hit.document.name,
            source_path=hit.document.source_path, locator_label=locator_label(hit),
            fragment=fragment(c.start, c.end), start=c.start, end=c.end, quote=c.content,
            cosine_distance=hit.cosine_distance))
    return citations
