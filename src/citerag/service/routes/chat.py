"""The OpenAI-compatible endpoints, for chat front ends and plugins that speak that API: `GET /v1/models` (one model
per collection the key may read; the model's id is the collection's name) and `POST /v1/chat/completions`.

The last user message is the question; the earlier ones make a follow-up standalone before it is searched, as in a
conversation (citerag.app.conversations; the query used comes back as `query`), and the sections an earlier answer
listed under "Sources:" count as that turn's cited sections. Nothing is stored: an OpenAI client sends the whole
conversation every time. The assistant's message keeps its [n] markers and ends with a Markdown list of
its sources, whose links open each source at the quote, for clients that show only the text; the same sources
come structured as `citations` on the completion (and on the last chunk of a stream). A refusal is an ordinary
assistant message, with `refused: true` beside it."""

from __future__ import annotations

import itertools
import json
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse
from starlette.background import BackgroundTask

from citerag.answer.followup import PastTurn
from citerag.app import conversations, experiments
from citerag.app.collection import Collection
from citerag.app.models import AskOptions, check_text
from citerag.errors import CiteragError
from citerag.service import recording
from citerag.service.auth import Caller, ServiceDep
from citerag.service.errors import ApiError
from citerag.service.metrics import observe_answer, observe_events
from citerag.service.present import answer_json
from citerag.service.routes.answers import filters_field
from citerag.service.schemas import SearchFilters
from citerag.types import Answer

router = APIRouter(prefix="/v1", tags=["openai"])


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str = Field(max_length=4000)


class ChatMessage(BaseModel):
    # Clients send fields of their own (name, tool_calls, ...): ignored, as the API they speak allows.
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None


EXAMPLE: dict[str, Any] = {"model": "default",
                           "messages": [{"role": "user", "content": "What does a red dot in systemctl status mean?"}]}


class ChatRequest(BaseModel):
    # temperature, max_tokens, user, stream_options and the rest: accepted and ignored (the answer is cited
    # extraction or the collection's generator, not sampled text).
    model_config = ConfigDict(extra="ignore", json_schema_extra={"examples": [EXAMPLE]})
    model: str = Field(min_length=1, max_length=64)
    messages: list[ChatMessage] = Field(min_length=1, max_length=200)
    stream: bool = False
    # citerag's own: which documents may be searched (an OpenAI client sends it in extra_body).
    filters: SearchFilters | None = None


def _text(message: ChatMessage) -> str:
    return message.content if isinstance(message.content, str) else "\n".join(p.text for p in message.content or [])


# A line of the source list this endpoint writes: "[n] [document, section](link): ..."; the section is what follows
# the document's name (a name with ", " in it splits wrongly, which only costs the fold one hint).
_SOURCE_LINE = re.compile(r"^\[\d+\] \[[^\]]*?, ([^\]]+)\]\(", re.MULTILINE)


def _earlier(request: ChatRequest) -> list[PastTurn]:
    """The user's earlier questions, each with the sections the assistant's reply after it listed."""
    turns: list[PastTurn] = []
    for message in request.messages[:-1]:
        text = _text(message).strip()
        if message.role == "user" and text:
            turns.append(PastTurn(text[:4000]))
        elif message.role == "assistant" and turns and "\n\nSources:\n" in text:
            sections = tuple(dict.fromkeys(_SOURCE_LINE.findall(text.rsplit("\n\nSources:\n", 1)[1])))
            turns[-1] = PastTurn(turns[-1].question, sections=sections)
    return turns


def _question(request: ChatRequest) -> str:
    last = request.messages[-1]
    if last.role != "user":
        raise ApiError(422, "the last message must be the user's question", "messages")
    text = _text(last)
    try:
        return check_text(text, "messages")
    except CiteragError as exc:
        raise ApiError(422, str(exc), "messages") from None


def _collection(svc: ServiceDep, who: Caller, name: str) -> Collection:
    if not who.sees(name) or name not in svc.app.collection_names():
        raise ApiError(404, f"model {name!r} not found: GET /v1/models lists the collections this key may read",
                       "model")
    try:
        return svc.app.collection(name)
    except CiteragError:
        raise ApiError(404, f"model {name!r} not found", "model") from None


def sources_markdown(citations: list[dict[str, Any]], base: str) -> str:
    """The sources as a client that shows only text sees them: each [n], its document and section, and a link
    that opens the source at the quote (absolute: the chat client is served from elsewhere)."""
    lines = []
    for c in citations:
        where = c["document_name"] + (f", {c['section']}" if c.get("section") else "")
        quote = " ".join(c["quote"].split())
        quote = quote if len(quote) <= 160 else quote[:157] + "..."
        lines.append(f"[{c['index']}] [{where}]({base}{c['href']}): \"{quote}\"")
    return "\n\nSources:\n" + "\n".join(lines) if lines else ""


def _completion_fields(name: str, answer: Answer, base: str, query: str) -> tuple[str, dict[str, Any]]:
    """The assistant's text (answer and sources) and the fields beside it: citations, refused, markers, query."""
    data = answer_json(name, answer)
    extra = {"citations": data["citations"], "refused": data["refused"], "markers": data["markers"],
             "trace_id": data.get("trace_id"), "query": query}
    return answer.answer + sources_markdown(data["citations"], base), extra


@router.get("/models")
def models(svc: ServiceDep, who: Caller) -> JSONResponse:
    names = [n for n in svc.app.collection_names() if who.sees(n)]
    return JSONResponse({"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "citerag"}
                                                    for n in names]})


@router.post("/chat/completions", response_model=None,
             responses={200: {"content": {"application/json": {}, "text/event-stream": {}},
                              "description": "A chat completion, or with stream=true its chunks."}})
def chat_completions(body: ChatRequest, request: Request, svc: ServiceDep,
                     who: Caller) -> JSONResponse | EventSourceResponse:
    collection = _collection(svc, who, body.model)
    question = _question(body)
    options = experiments.route(collection, AskOptions(filters=filters_field(body.filters, who)), who.key)
    followup = conversations.retrieval_query(collection, _earlier(body), question, options)
    query = followup.query
    base = str(request.base_url).rstrip("/")
    ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    head = {"id": ident, "created": created, "model": collection.name}
    if not body.stream:
        try:
            answer = experiments.mark(collection.ask(query, options, followup), options)
        except CiteragError as exc:
            raise ApiError(409, str(exc)) from None
        observe_answer(collection, answer)
        recording.answered(svc.audit, who, "chat", collection, question, answer)
        answer.question = question
        content, extra = _completion_fields(collection.name, answer, base, query)
        return JSONResponse({**head, "object": "chat.completion",
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                          "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}, **extra})
    answer_events = collection.ask_events(query, options, followup)
    events = recording.answering(svc.audit, who, "chat", collection, question,
                                 observe_events(collection, experiments.marked(answer_events, options)))
    try:
        first = next(events)  # retrieval runs before the response starts: an empty collection is still a 409
    except CiteragError as exc:
        raise ApiError(409, str(exc)) from None
    chunks = _chunks(collection.name, head, base, query, first, events)
    return EventSourceResponse(chunks, ping=15, background=BackgroundTask(_close, chunks, events, answer_events))


def _close(*streams: Iterator[Any]) -> None:
    for stream in streams:
        close = getattr(stream, "close", None)
        if callable(close):
            close()


def _chunks(name: str, head: dict[str, Any], base: str, query: str, first: tuple[str, Any],
            events: Iterator[tuple[str, Any]]) -> Iterator[dict[str, str]]:
    """The OpenAI stream: a role chunk, the text as it is written, the sources, a last chunk with the citations,
    then [DONE]."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, str]:
        return {"data": json.dumps({**head, "object": "chat.completion.chunk", **extra,
                                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})}

    yield chunk({"role": "assistant", "content": ""})
    written = False
    try:
        for kind, value in itertools.chain([first], events):
            if kind == "delta":
                written = True
                yield chunk({"content": value})
            elif kind == "answer":
                content, extra = _completion_fields(name, value, base, query)
                rest = content[len(value.answer):] if written else content  # a refusal's text comes only here
                if rest:
                    yield chunk({"content": rest})
                yield chunk({}, "stop", **extra)
    except CiteragError as exc:  # the generator or the store failed after the stream began: said in it
        yield chunk({"content": f"\n\n(error: {exc})"}, "stop")
    yield {"data": "[DONE]"}
