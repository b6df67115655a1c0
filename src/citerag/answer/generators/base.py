from __future__ import annotations

from typing import Protocol

from citerag.types import Citation


class Generator(Protocol):
    name: str

    def generate(self, question: str, sources: list[Citation], prompt: str) -> str:
        """Answer text whose claims are marked [n]; only called when the gate kept sources."""
        ...
