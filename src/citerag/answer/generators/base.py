from __future__ import annotations

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
