"""Conversations over one collection: ask a question in one (a follow-up is rewritten from the earlier turns before
it is searched), list yours, read one back, delete it. A conversation belongs to the key that started it: another
key, even one that reads the same collection, gets a 404 as if it did not exist."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from citerag.app import conversations
from citerag.app.collection import Collection
from citerag.app.models import AskOptions
from citerag.service import recording
from citerag.service.auth import Caller, Readable, ServiceDep
from citerag.service.errors import ApiError
from citerag.service.metrics import observe_answer, observe_events
from citerag.service.present import answer_json, citation_json
from citerag.service.routes.answers import close_streams, filters_field, stream_events, text_field
from citerag.service.schemas import AskRequest
from citerag.service.state import Service
from citerag.types import Citation, ConversationInfo, Turn

router = APIRouter(prefix="/v1/collections/{name}/conversations", tags=["conversations"])
ConversationId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="A conversation's id (32 hex digits).")]


def info_json(c: ConversationInfo) -> dict[str, Any]:
    return {"id": c.id, "title": c.title, "turns": c.turns, "created_at": c.created_at, "updated_at": c.updated_at}


def turn_json(name: str, t: Turn) -> dict[str, Any]:
    return {"n": t.n, "question": t.question, "query": t.query, "answer": t.answer, "refused": t.refused,
            "citations": [citation_json(name, Citation(**c)) for c in t.citations], "trace_id": t.trace_id,
            "created_at": t.created_at}


def _found(call: Any) -> Any:
    try:
        return call()
    except conversations.ConversationNotFound as exc:
        raise ApiError(404, str(exc)) from None


def _ask(collection: Collection, who: Caller, request: AskRequest, conversation_id: str | None,
         svc: Service) -> JSONResponse | EventSourceResponse:
    question = text_field(request.question, "question")
    options = AskOptions(mode=request.mode, k=request.k, threshold=request.threshold,
                         max_sources=request.max_sources, filters=filters_field(request.filters, who))
    if not request.stream:
        asked = _found(lambda: conversations.ask(collection, question, owner=who.key,
                                                 conversation_id=conversation_id, options=options))
        observe_answer(collection, asked.answer)
        recording.answered(svc.audit, who, "conversation", collection, question, asked.answer,
                           conversation=asked.conversation_id)
        return JSONResponse({"conversation_id": asked.conversation_id, "turn": asked.turn.n, "query": asked.turn.query,
                             **answer_json(collection.name, asked.answer)})
    answer_events = conversations.ask_events(collection, question, owner=who.key, conversation_id=conversation_id,
                                             options=options)
    events = recording.answering(svc.audit, who, "conversation", collection, question,
                                 observe_events(collection, answer_events), conversation=conversation_id)
    # The history is read and the retrieval runs before the response starts: a conversation that is not the
    # caller's is a 404, an empty collection a 409, as for the JSON answer.
    first = _found(lambda: next(events))
    second = next(events)
    body = stream_events(collection.name, first, _chain(second, events))
    return EventSourceResponse(body, ping=15, background=BackgroundTask(close_streams, body, events, answer_events))


def _chain(first: tuple[str, Any], rest: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    yield first
    yield from rest


@router.post("", response_model=None,
             responses={200: {"content": {"application/json": {}, "text/event-stream": {}},
                              "description": "The answer in a new conversation (its id in `conversation_id`)."}})
def start(request: AskRequest, collection: Readable, who: Caller,
          svc: ServiceDep) -> JSONResponse | EventSourceResponse:
    return _ask(collection, who, request, None, svc)


@router.post("/{conversation_id}", response_model=None,
             responses={200: {"content": {"application/json": {}, "text/event-stream": {}},
                              "description": "The answer to a follow-up, and the query it was searched with."}})
def follow_up(conversation_id: ConversationId, request: AskRequest, collection: Readable,
              who: Caller, svc: ServiceDep) -> JSONResponse | EventSourceResponse:
    return _ask(collection, who, request, conversation_id, svc)


@router.get("")
def listed(collection: Readable, who: Caller) -> JSONResponse:
    return JSONResponse({"conversations": [info_json(c) for c in conversations.conversations(collection, who.key)]})


@router.get("/{conversation_id}")
def read(conversation_id: ConversationId, collection: Readable, who: Caller) -> JSONResponse:
    found, turns = _found(lambda: conversations.conversation(collection, conversation_id, who.key,
                                                                          who.audience))
    return JSONResponse({**info_json(found), "turns": [turn_json(collection.name, t) for t in turns]})


@router.delete("/{conversation_id}", status_code=204)
def delete(conversation_id: ConversationId, collection: Readable, who: Caller) -> Response:
    _found(lambda: conversations.delete(collection, conversation_id, who.key))
    return Response(status_code=204)
