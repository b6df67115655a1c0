"""Assemble canonical text from blocks: headings open sections, blocks are joined by a blank line.

Every block's offsets are found where it is placed (`len` of the text so far), and a block may
carry a locator (a page, a cue, a row): the span it occupies is recorded with it, so the locator
map and the canonical text are built together and cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from citerag.errors import ExtractionError
from citerag.types import Extracted, Locator, Section


@dataclass
class _Head:
    title: str
    start: int
    body_start: int
    prefix: str


@dataclass
class TextBuilder:
    separator: str = "\n\n"
    _parts: list[str] = field(default_factory=list)
    _length: int = 0
    _heads: list[_Head] = field(default_factory=list)
    locators: list[Locator] = field(default_factory=list)

    def _append(self, text: str, sep: str | None = None) -> tuple[int, int]:
        if self._parts:
            sep = self.separator if sep is None else sep
            self._parts.append(sep)
            self._length += len(sep)
        start = self._length
        self._parts.append(text)
        self._length += len(text)
        return start, self._length

    def heading(self, title: str, prefix: str = "", **locator: Any) -> tuple[int, int]:
        """Open a section; its title becomes a block of its own (not cut into chunks)."""
        title = " ".join(title.split())
        start, end = self._append(title)
        self._heads.append(_Head(title, start, end, prefix))
        if locator:
            self.locators.append(Locator(start, end, **locator))
        return start, end

    def set_prefix(self, prefix: str) -> None:
        """Set the prefix of the section opened last (e.g. once its header row is known)."""
        if self._heads:
            self._heads[-1].prefix = prefix

    def block(self, text: str, sep: str | None = None, **locator: Any) -> tuple[int, int] | None:
        """Append a non-blank block (after `sep`, default a blank line); returns its (start, end)."""
        text = text.strip()
        if not text:
            return None
        start, end = self._append(text, sep)
        if locator:
            self.locators.append(Locator(start, end, **locator))
        return start, end

    def add_locator(self, start: int, end: int, **locator: Any) -> None:
        self.locators.append(Locator(start, end, **locator))

    @property
    def first_heading(self) -> str:
        return self._heads[0].title if self._heads else ""

    @property
    def length(self) -> int:
        return self._length

    @property
    def empty(self) -> bool:
        return not self._parts

    def text(self) -> str:
        return "".join(self._parts)

    def build(self, title: str, extractor: str, version: str, warnings: list[str] | None = None,
              what: str = "document") -> Extracted:
        if not any(p.strip() for p in self._parts[::2]):
            raise ExtractionError(f"no text found in the {what}")
        text = self.text()
        sections: list[Section] = []
        heads = self._heads
        if not heads or heads[0].start > 0:
            sections.append(Section("", 0, 0, heads[0].start if heads else len(text)))
        for i, h in enumerate(heads):
            end = heads[i + 1].start if i + 1 < len(heads) else len(text)
            sections.append(Section(h.title, h.start, h.body_start, end, h.prefix))
        locators = sorted(self.locators, key=lambda loc: (loc.start, loc.end))
        return Extracted(text, title, sections, extractor, version, list(warnings or []), locators)


def table_text(rows: Iterable[Iterable[Iterable[str]]]) -> str:
    """A word-processor table as text: each row a line of its cells joined by " | ", each cell its paragraphs'
    words joined by single spaces; rows with no text are left out."""
    lines = []
    for row in rows:
        cells = (" ".join(p for p in (" ".join(text.split()) for text in cell) if p) for cell in row)
        line = " | ".join(cells)
        if line.strip(" |"):
            lines.append(line)
    return "\n".join(lines)
