"""Search and answer over one collection; answers also as server-sent events with citations in every mode."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from citerag.app import experiments
from citerag.app.models import AskOptions, FilterError, Filters, SearchOptions, check_text
from citerag.errors import CiteragError
from citerag.keystore.base import Principal
from citerag.service import recording
from citerag.service.auth import Caller, Readable, ServiceDep
from citerag.service.errors import ApiError
from citerag.service.metrics import observe_answer, observe_events, observe_search
from citerag.service.present import answer_json, citation_json, hit_json, refusal_json, search_json
from citerag.service.schemas import AskRequest, SearchFilters, SearchRequest
from citerag.types import Answer

log = logging.getLogger("citerag.service")
router = APIRouter(prefix="/v1/collections/{name}", tags=["answers"])


def text_field(value: str, field: str) -> str:
    try:
        return check_text(value, field)
    except CiteragError as exc:
        raise ApiError(422, str(exc), field) from None


def filters_field(body: SearchFilters | None, who: Principal, field: str = "filters") -> Filters:
    """A request's filters, their values checked (a 422 names the wrong one: filters.type, ...), for a caller who
    may read `who.audience`'s documents: every question route goes through here."""
    try:
        return Filters.parse(None if body is None else body.model_dump(exclude_none=True), field).seen_by(who.audience)
    except FilterError as exc:
        raise ApiError(422, str(exc), exc.field) from None


# The bodies go out as JSONResponse: a dict returned would be walked again by FastAPI's jsonable_encoder, the
# largest single cost of a cached answer under load (the dicts hold only JSON types: the stream json.dumps them).
@router.post("/search", response_model=dict[str, Any])
def search(request: SearchRequest, collection: Readable, who: Caller, svc: ServiceDep) -> JSONResponse:
    query = text_field(request.query, "query")
    result = collection.search(query, SearchOptions(mode=request.mode, k=request.k,
                                                    filters=filters_field(request.filters, who)))
    observe_search(collection, result)
    recording.searched(svc.audit, who, collection, query, result)
    return JSONResponse(search_json(collection.name, query, result))


@router.post("/ask", response_model=None,
             responses={200: {"content": {"application/json": {}, "text/event-stream": {}},
                              "description": "The answer, or with stream=true its events."}})
def ask(request: AskRequest, collection: Readable, who: Caller,
        svc: ServiceDep) -> JSONResponse | EventSourceResponse:
    question = text_field(request.question, "question")
    options = experiments.route(collection, AskOptions(mode=request.mode, k=request.k, threshold=request.threshold,
                                                       max_sources=request.max_sources,
                                                       filters=filters_field(request.filters, who)), who.key)
    if not request.stream:
        answer = experiments.mark(collection.ask(question, options), options)
        observe_answer(collection, answer)
        recording.answered(svc.audit, who, "ask", collection, question, answer)
        return JSONResponse(answer_json(collection.name, answer))
    answer_events = collection.ask_events(question, options)
    events = recording.answering(svc.audit, who, "ask", collection, question,
                                 observe_events(collection, experiments.marked(answer_events, options)))
    # The retrieval runs before the response starts, so that an empty collection is a 409 like the JSON answer.
    first = next(events)
    body = stream_events(collection.name, first, events)
    return EventSourceResponse(body, ping=15, background=BackgroundTask(close_streams, body, events, answer_events))


def close_streams(*streams: Iterator[Any]) -> None:
    """Close a streamed answer's generators, outermost first, once its response has ended. A client that hung up
    only stops sse_starlette iterating them (it cancels the task, it does not close a sync iterator), and a
    generator left to the garbage collector ends whenever and wherever that runs; closed here, the answer's trace
    ends now (marked abandoned when it had not finished) and a model still writing is stopped. Closing a
    generator that already ended does nothing."""
    for stream in streams:
        close = getattr(stream, "close", None)
        if callable(close):
            close()


def stream_events(name: str, first: tuple[str, Any], events: Iterator[tuple[str, Any]]) -> Iterator[dict[str, str]]:
    def event(kind: str, data: Any) -> dict[str, str]:
        return {"event": kind, "data": json.dumps(data)}

    try:
        for kind, value in _chain(first, events):
            if kind == "conversation":  # a conversation's turn: its id and the query the follow-up became
                yield event("conversation", value)
            elif kind == "retrieval":
                yield event("retrieval", {"hits": [hit_json(h) for h in value]})
            elif kind == "citation":
                yield event("citation", citation_json(name, value))
            elif kind == "delta":
                yield event("delta", {"text": value})
            elif kind == "answer":
                answer: Answer = value
                if answer.refused:
                    yield event("refusal", {**refusal_json(answer), "message": answer.answer})
                yield event("final", answer_json(name, answer))
    except CiteragError as exc:  # the generator failed, or the store: said in the stream, which has begun
        yield event("error", {"error": str(exc)})
    except Exception:
        log.exception("answer stream failed")
        yield event("error", {"error": "internal error"})
    yield event("done", {})


def _chain(first: tuple[str, Any], rest: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    yield first
    yield from rest
