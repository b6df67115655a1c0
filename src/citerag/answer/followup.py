"""A follow-up question made standalone for retrieval: the earlier turns of the conversation folded into the query.

A follow-up such as "And how do I make it start at boot?" names nothing the index can match. Two ways out:

- `folded_query`, LLM-free: the earlier questions and the sections their answers cited, most recent first and
  fewer the further back, put in front of the question. One text, so the search, the refusal gate and the trace
  all see what was used; measured on the follow-up dev sets (docs/conversations.md).
- `condensed_query`, with an LLM: a condense prompt asks the model for one standalone question; a reply that is
  empty, too long or shares no word with the conversation falls back to the folded query.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

# At most this many earlier turns are looked at, and a folded query keeps at most this many characters of them
# (the encoders read ~256 tokens; the question itself is never cut).
HISTORY_TURNS = 3
HISTORY_CHARS = 600


@dataclass(frozen=True)
class PastTurn:
    question: str  # as the user asked it
    query: str = ""  # the retrieval query actually used for it
    sections: tuple[str, ...] = field(default_factory=tuple)  # "Title > Section" of what its answer cited


@dataclass(frozen=True)
class FoldRule:
    """How the earlier turns are folded in (the fitted values are the defaults; docs/conversations.md)."""

    questions: int = 1  # earlier questions kept, most recent first
    sections: int = 1  # cited sections kept of the most recent turn


DEFAULT_RULE = FoldRule()


def folded_query(history: Sequence[PastTurn], question: str, rule: FoldRule = DEFAULT_RULE) -> str:
    """The question with the conversation's context in front of it; the question alone when there is none."""
    recent = list(history)[-HISTORY_TURNS:][::-1]
    parts: list[str] = []
    if recent and rule.sections:
        parts.extend(dict.fromkeys(recent[0].sections[:rule.sections]))
    parts.extend(t.question for t in recent[:rule.questions])
    context = " ".join(p.strip() for p in parts if p.strip())[:HISTORY_CHARS]
    return f"{context}\n{question}" if context else question


CONDENSE_SYSTEM = ("You rewrite the user's last question of a conversation as one standalone question that can be "
                   "understood without the conversation: replace pronouns and implicit references with what they "
                   "refer to. Do not answer it. Reply with the rewritten question only.")
MAX_REWRITE_CHARS = 400


def condense_messages(history: Sequence[PastTurn], question: str) -> list[dict[str, Any]]:
    lines = [f"User: {t.question}" for t in list(history)[-HISTORY_TURNS:]]
    prompt = "Conversation:\n" + "\n".join(lines) + f"\n\nLast question: {question}\n\nStandalone question:"
    return [{"role": "system", "content": CONDENSE_SYSTEM}, {"role": "user", "content": prompt}]


def clean_rewrite(text: str) -> str:
    """The model's reply as one line, without a label or quotes it may have added ("" when unusable)."""
    line = next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^(standalone question|rewritten question|question|user)\s*:\s*", "", line, flags=re.IGNORECASE)
    line = line.strip().strip("\"'“”„").strip()
    return line if 0 < len(line) <= MAX_REWRITE_CHARS else ""


def _words(text: str) -> set[str]:
    return {w.casefold() for w in re.findall(r"\w{4,}", text)}


def condensed_query(complete: Callable[[list[dict[str, Any]]], str], history: Sequence[PastTurn],
                    question: str) -> str:
    """The LLM's standalone question; the folded query when the model's reply is unusable: empty, too long, or
    sharing no word with the conversation (a small model may apologise or answer instead). `complete` sends chat
    messages and returns the reply's text (a generator's `complete`)."""
    if not history:
        return question
    rewrite = clean_rewrite(complete(condense_messages(history, question)))
    asked = _words(question).union(*(_words(t.question) for t in list(history)[-HISTORY_TURNS:]))
    return rewrite if _words(rewrite) & asked else folded_query(history, question)
