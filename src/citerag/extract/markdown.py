"""Markdown and plain text: the canonical text is the decoded file; sections come from `## ` lines.

The heading rules follow the reference chunker exactly, including JavaScript's notion of a line
(`.` stops at \\n, \\r, U+2028 and U+2029), so strategy E agrees with it chunk for chunk.
"""

from __future__ import annotations

import re
from pathlib import Path

from citerag.extract.decode import decode_text
from citerag.text import js_trim
from citerag.types import Extracted, Section

_DOT = r"[^\n\r\u2028\u2029]"
_HEADING = re.compile(rf"(?:(?<=[\n\r\u2028\u2029])|\A)## ({_DOT}+)(?=[\n\r\u2028\u2029]|\Z)")
_HEADING_LINE = re.compile(rf"## {_DOT}+\n")
_TITLE = re.compile(r"^# (.+)$", re.M)


def markdown_sections(text: str) -> list[Section]:
    heads = [(m.start(), js_trim(m.group(1))) for m in _HEADING.finditer(text)]
    if not heads:
        return [Section("", 0, 0, len(text))]
    sections = []
    if heads[0][0] > 0:
        # The reference drops this leading text; citerag keeps it as a section-less span.
        sections.append(Section("", 0, 0, heads[0][0]))
    for i, (at, title) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(text)
        skip = _HEADING_LINE.match(text, at, end)
        sections.append(Section(title, at, skip.end() if skip else at, end))
    return sections


class MarkdownExtractor:
    name = "markdown"
    version = "1"
    suffixes: tuple[str, ...] = (".md", ".markdown")

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        text, warnings = decode_text(data)
        sections = markdown_sections(text)
        if title is None:
            first = _TITLE.search(text, 0, sections[0].end)
            title = js_trim(first.group(1)) if first else path.stem
        return Extracted(text, title, sections, self.name, self.version, warnings)


class TextExtractor(MarkdownExtractor):
    name = "text"
    suffixes: tuple[str, ...] = (".txt", ".text", ".rst")

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        text, warnings = decode_text(data)
        return Extracted(text, title or path.stem, markdown_sections(text), self.name, self.version,
                         warnings)
