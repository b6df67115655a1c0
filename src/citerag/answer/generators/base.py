from __future__ import annotations

import threading
from typing import Any, Protocol

from citerag.errors import CiteragError
from citerag.types import Citation

SYSTEM = ("You answer questions only from the numbered sources the user gives you, and mark every claim "
          "with the number of its source in square brackets, like [1].")


class Generator(Protocol):
    name: str

    def generate(self, question: str, sources: list[Citation], prompt: str) -> str:
        """Answer text whose claims are marked [n]; only called when the gate kept sources."""
        ...


class Completer(Protocol):
    """An LLM generator that also answers chat messages of the caller's own (a follow-up's condense prompt); the
    extractive generator is not one."""

    def complete(self, messages: list[dict[str, Any]]) -> str: ...


class GeneratorError(CiteragError):
    """A generator could not produce an answer (model missing, server down, timed out, refused)."""


def chat_messages(prompt: str) -> list[dict[str, Any]]:
    """The prompt (instructions, numbered sources, question) as a chat exchange."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]


class Usage(threading.local):
    """The token counts the model reported for the last call made on this thread (a generator is shared by the
    request threads): (prompt, completion), or None when it reported none (a stream, the extractive generator)."""

    tokens: tuple[int, int] | None = None

    def keep(self, reply: Any) -> None:
        usage = reply.get("usage") if isinstance(reply, dict) else None
        try:
            self.tokens = (int(usage["prompt_tokens"]), int(usage["completion_tokens"])) if usage else None
        except (KeyError, TypeError, ValueError):
            self.tokens = None
