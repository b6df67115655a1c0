"""What the API returns: the CLI's JSON objects plus what a client needs to open a source at the quote
(a typed locator, an href, the positions of the [n] markers, the refusal's inputs). Links are written here,
by the server, from stored ids; never from model text."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from citerag.answer.citations import text_directive, typed_locator
from citerag.app.models import DocumentStatus
from citerag.types import SOURCE_SCHEME, Answer, Citation, Document, Hit, SearchResult

HTML_SUFFIXES = (".html", ".htm", ".xhtml")
_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def document_url(collection: str, document_id: int) -> str:
    return f"/v1/collections/{quote(collection, safe='')}/documents/{document_id}"


def live_url(source_path: str) -> str:
    """The live URL of a web source's document (its key, `source:NAME:URL`), else ''."""
    if not source_path.startswith(SOURCE_SCHEME):
        return ""
    key = source_path.split(":", 2)[-1]
    return key if key.startswith(("http://", "https://")) else ""


def citation_json(collection: str, c: Citation) -> dict[str, Any]:
    """The citation plus `locator` (typed), `href` (the original at the quote: a PDF at its page, an HTML page
    with a text fragment; else the canonical-text view at #char=a,b) and `text_href` (always that view)."""
    url = document_url(collection, c.document_id)
    locator = typed_locator(c)
    text_href = f"{url}/view#char={c.start},{c.end}"
    if locator["type"] == "page":
        href = f"{url}/file#page={locator['page']}"
    elif c.document_name.lower().endswith(HTML_SUFFIXES) and (directive := text_directive(c.quote)):
        href = f"{url}/file{directive}"
    else:
        href = text_href
    data = {**c.as_json(), "locator": locator, "href": href, "text_href": text_href}
    if live_url(c.source_path):  # a web source's page: the live URL at the quote, besides the stored copy
        data["live_href"] = (c.live_url or live_url(c.source_path)) + (
            f"#page={locator['page']}" if locator["type"] == "page" else
            text_directive(c.quote) if c.document_name.lower().endswith(HTML_SUFFIXES) else "")
    elif c.live_url:  # a Git file's page on its forge, at the commit read
        data["live_href"] = c.live_url
    data.pop("source_path")  # a server path or an upload key: the href is how a client reaches the source
    data.pop("live_url", None)  # given as live_href, with the quote's fragment
    return data


def markers(text: str) -> list[dict[str, int]]:
    """Each [n] in the answer (a group [1, 2] gives one entry per number, with the group's span), in code points."""
    return [{"index": int(n), "start": m.start(), "end": m.end()}
            for m in _MARKER.finditer(text) for n in re.findall(r"\d+", m.group(1))]


def refusal_json(answer: Answer) -> dict[str, Any]:
    best = answer.best_distance
    return {"refused": answer.refused, "best_distance": None if best is None else round(best, 6),
            "threshold": answer.threshold}


def answer_json(collection: str, answer: Answer) -> dict[str, Any]:
    data = answer.as_json()
    data["citations"] = [citation_json(collection, c) for c in answer.citations]
    data["markers"] = markers(answer.answer) if not answer.refused else []
    data["refusal"] = refusal_json(answer)
    data.pop("prompt", None)
    return data


def search_json(collection: str, query: str, result: SearchResult) -> dict[str, Any]:
    return {"query": query,
            "results": [{"rank": h.rank, "score": float(h.score), **citation_json(collection, c)}
                        for h, c in zip(result.hits, result.citations, strict=True)],
            "timings_ms": {k: round(v * 1000, 2) for k, v in result.timings.items()}}


def hit_json(hit: Hit) -> dict[str, Any]:
    return {"rank": hit.rank, "document_id": hit.document.id, "document_name": hit.document.name,
            "section": hit.chunk.section, "cosine_distance": round(hit.cosine_distance, 6)}


def document_json(collection: str, doc: Document, stale: bool, job: str | None) -> dict[str, Any]:
    url = document_url(collection, doc.id)
    data = DocumentStatus(doc, stale).as_json()
    # A server's documents are named, not located: an upload's key and a server path are not a client's business.
    data.pop("source_path", None)
    if doc.source_path.startswith(SOURCE_SCHEME):  # a source's document: which source, and its own identifier
        name, _, key = doc.source_path[len(SOURCE_SCHEME):].partition(":")
        data["source"] = {"name": name, "key": key, **({"live_href": key} if live_url(doc.source_path) else {})}
    return {**data, "sha256": doc.sha256, "job": job, "file_href": f"{url}/file", "text_href": f"{url}/view"}
