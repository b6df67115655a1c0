"""A question asked inside a conversation: the follow-up made standalone, answered like any question, and kept.

A conversation belongs to its collection (its rows are in the collection's store, deleted with it) and to the
owner that started it (an API key's id, or "local"); any other owner is told it does not exist. The retrieval
query is the question rewritten from the earlier turns (citerag.answer.followup): by the collection's LLM when it
has one (`llama`, `openai`), else by the LLM-free fold. The refusal gate, the cache keys and the trace all see that
query, and the turn keeps it beside the question, so the API and the page can show what was searched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from citerag.answer.followup import PastTurn, condensed_query, folded_query
from citerag.answer.generators.base import GeneratorError
from citerag.app import access, experiments
from citerag.app.collection import Collection
from citerag.app.models import AskOptions, Followup
from citerag.errors import CiteragError
from citerag.store.conversations import NotYours
from citerag.types import Answer, ConversationInfo, Turn

LLM_GENERATORS = ("llama", "openai")


class ConversationNotFound(CiteragError):
    """No such conversation for this owner in this collection (one of another owner is not found either)."""


@dataclass(frozen=True)
class Asked:
    conversation_id: str
    turn: Turn  # as stored: the question, the retrieval query used, the answer and its citations
    answer: Answer


def past_turns(turns: Sequence[Turn]) -> list[PastTurn]:
    return [PastTurn(t.question, t.query, tuple(dict.fromkeys(str(c.get("section") or "") for c in t.citations
                                                               if c.get("section")))) for t in turns]


def history(collection: Collection, conversation_id: str | None, owner: str,
            options: AskOptions | None) -> tuple[str, list[PastTurn]]:
    """The conversation's id (a new one for None) and its earlier turns as the caller may read them now (the
    options' audience); ConversationNotFound if not the owner's."""
    if conversation_id is None:
        return uuid.uuid4().hex, []
    audience = options.filters.audience if options is not None else None
    return conversation_id, past_turns(conversation(collection, conversation_id, owner, audience)[1])


def retrieval_query(collection: Collection, earlier: Sequence[PastTurn], question: str,
                    options: AskOptions | None = None, conversation_id: str | None = None) -> Followup:
    """The standalone query for `question` after `earlier` turns: the LLM's rewrite when the generator is an LLM
    (the fold if it fails or says nothing usable), else the fold; a first question is searched as asked."""
    if not earlier:
        return Followup(question, question, "none", 0, conversation_id)
    generator: Any = None
    name = (options.generator if options and options.generator else None) or collection.settings.generator
    if name in LLM_GENERATORS:
        generator = collection.generator(options)
    folded = folded_query(earlier, question)
    if generator is not None and hasattr(generator, "complete"):
        try:
            query = condensed_query(generator.complete, earlier, question)
        except GeneratorError:
            # The model is down: a folded query still finds the passage, and the answer step will say why.
            return Followup(question, folded, "fold, llm failed", len(earlier), conversation_id)
        # condensed_query falls back to the fold itself when the rewrite is unusable: the trace says which.
        return Followup(question, query, "llm" if query != folded else "fold, llm unusable", len(earlier),
                        conversation_id)
    return Followup(question, folded, "fold", len(earlier), conversation_id)


def keep(collection: Collection, conversation_id: str, owner: str, question: str, query: str,
         answer: Answer) -> Turn:
    turn = Turn(question, query, answer.answer, answer.refused, [c.as_json() for c in answer.citations],
                answer.trace_id)
    try:
        return collection.store.add_turn(conversation_id, owner, turn)
    except NotYours:
        raise ConversationNotFound(f"conversation {conversation_id!r} not found") from None


def ask(collection: Collection, question: str, *, owner: str, conversation_id: str | None = None,
        options: AskOptions | None = None, earlier: Sequence[PastTurn] | None = None) -> Asked:
    """Answer `question` in the conversation (a new one when None) and keep the turn. `earlier` replaces the
    stored history (an OpenAI client sends the whole conversation each time)."""
    cid, stored = history(collection, conversation_id, owner, options)
    turns = list(earlier) if earlier is not None else stored
    options = experiments.route(collection, options, owner, cid)  # the arm's generator rewrites, too
    followup = retrieval_query(collection, turns, question, options, cid)
    answer = experiments.mark(collection.ask(followup.query, options, followup), options)
    answer.question = question
    return Asked(cid, keep(collection, cid, owner, question, followup.query, answer), answer)


def ask_events(collection: Collection, question: str, *, owner: str, conversation_id: str | None = None,
               options: AskOptions | None = None, earlier: Sequence[PastTurn] | None = None
               ) -> Iterator[tuple[str, Any]]:
    """As `ask`, streamed: ("conversation", {id, query}) first, then the question path's events; the turn is kept
    when the final answer has come."""
    cid, stored = history(collection, conversation_id, owner, options)
    turns = list(earlier) if earlier is not None else stored
    options = experiments.route(collection, options, owner, cid)  # the arm's generator rewrites, too
    followup = retrieval_query(collection, turns, question, options, cid)
    yield "conversation", {"id": cid, "query": followup.query}
    for kind, value in experiments.marked(collection.ask_events(followup.query, options, followup), options):
        if kind == "answer" and isinstance(value, Answer):
            value.question = question
            keep(collection, cid, owner, question, followup.query, value)
        yield kind, value


def conversations(collection: Collection, owner: str) -> list[ConversationInfo]:
    return collection.store.conversations(owner)


def conversation(collection: Collection, conversation_id: str, owner: str,
                 audience: frozenset[str] | None = None) -> tuple[ConversationInfo, list[Turn]]:
    """The owner's conversation, its turns as a caller who may read `audience`'s documents may read them now."""
    found = collection.store.conversation(conversation_id)
    if found is None or found[0].owner != owner:
        raise ConversationNotFound(f"conversation {conversation_id!r} not found")
    return found[0], access.turns(collection, found[1], audience)


def delete(collection: Collection, conversation_id: str, owner: str) -> None:
    conversation(collection, conversation_id, owner)  # another owner's is not found, and stays
    collection.store.delete_conversation(conversation_id)
