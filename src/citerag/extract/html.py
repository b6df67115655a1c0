"""HTML: the readable body text, one block per paragraph-level element, sections from h1-h3.

Navigation, page headers/footers, tables of contents and scripts are dropped; tables are kept row
by row ("cell | cell"), <pre> keeps its line breaks. Blocks are joined by a blank line, so the
boundary chunker sees each HTML paragraph as a paragraph.
"""

from __future__ import annotations

import re
from pathlib import Path

import lxml.etree
import lxml.html

from citerag.errors import ExtractionError
from citerag.types import Extracted, Section

_DROP_TAGS = {"script", "style", "noscript", "template", "nav", "header", "footer", "head", "iframe",
              "object", "embed", "svg", "canvas", "button", "select", "textarea", "input", "map"}
_DROP_CLASSES = {"navheader", "navfooter", "toc", "breadcrumb", "breadcrumbs", "skip-link"}
_SECTION_TAGS = {"h1", "h2", "h3"}
_BLOCK_TAGS = {"p", "div", "section", "article", "main", "aside", "blockquote", "ul", "ol", "li", "dl",
               "dt", "dd", "figure", "figcaption", "address", "center", "fieldset", "legend", "h4", "h5",
               "h6", "hr", "details", "summary", "body", "html", "form", "caption"}
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")


def _text_of(el: lxml.etree._Element) -> str:
    return "".join(str(t) for t in el.itertext())


def _collapse(s: str) -> str:
    return _HTML_SPACE.sub(" ", s).strip(" ")


def _dropped(el: lxml.etree._Element) -> bool:
    if not isinstance(el.tag, str):  # comments, processing instructions
        return True
    tag = el.tag.rsplit("}", 1)[-1].lower()
    if tag in _DROP_TAGS or el.get("role") in ("navigation", "banner", "contentinfo"):
        return True
    return bool(_DROP_CLASSES & set((el.get("class") or "").split())) or el.get("hidden") is not None


def _local(el: lxml.etree._Element) -> str:
    return str(el.tag).rsplit("}", 1)[-1].lower()


class _Blocks:
    """Collects (kind, text) blocks while walking the tree; inline text accumulates until a block ends."""

    def __init__(self) -> None:
        self.blocks: list[tuple[str, str]] = []
        self._inline: list[str] = []

    def text(self, s: str | None) -> None:
        if s:
            self._inline.append(s)

    def line_break(self) -> None:
        self._inline.append("\x00")  # a <br>: survives whitespace collapsing, becomes \n

    def flush(self) -> None:
        if self._inline:
            lines = [_collapse(part) for part in "".join(self._inline).split("\x00")]
            text = "\n".join(line for line in lines if line)
            self._inline = []
            if text:
                self.blocks.append(("p", text))

    def add(self, kind: str, text: str) -> None:
        self.flush()
        if text:
            self.blocks.append((kind, text))


def _table_text(table: lxml.etree._Element) -> str:
    lines = []
    for el in table.iter():
        tag = _local(el) if isinstance(el.tag, str) else ""
        if tag == "caption":
            lines.append(_collapse(_text_of(el)))
        elif tag == "tr":
            cells = [_collapse(_text_of(c)) for c in el if isinstance(c.tag, str)
                     and _local(c) in ("td", "th")]
            line = " | ".join(c for c in cells if c)
            if line:
                lines.append(line)
    return "\n".join(line for line in lines if line)


def _pre_text(pre: lxml.etree._Element) -> str:
    lines = [line.rstrip() for line in _text_of(pre).replace("\r\n", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


def _walk(el: lxml.etree._Element, out: _Blocks, depth: int) -> None:
    tag = _local(el)
    if tag in _SECTION_TAGS:
        out.add(tag, _collapse(_text_of(el)))
    elif tag == "pre":
        out.add("pre", _pre_text(el))
    elif tag == "table":
        out.add("table", _table_text(el))
    elif tag == "br":
        out.line_break()
    elif depth > 200:  # absurdly deep nesting: keep the words, stop descending
        out.text(_text_of(el))
    else:
        block = tag in _BLOCK_TAGS
        if block:
            out.flush()
        out.text(el.text)
        for child in el:
            if not _dropped(child):
                _walk(child, out, depth + 1)
            if child.tail:
                out.text(child.tail)
        if block:
            out.flush()
        return
    # section, pre, table, br: the tail is handled by the parent


def html_blocks(data: bytes, what: str = "HTML") -> tuple[str, list[tuple[str, str]]]:
    """(the <title> text, the body's (kind, text) blocks) of one HTML document; EPUB chapters use it too.

    A document libxml2 finds empty gives no blocks; the caller decides whether that is an error.
    """
    parser = lxml.html.HTMLParser(huge_tree=True, no_network=True)
    try:
        root = lxml.html.document_fromstring(data, parser=parser)
    except (lxml.etree.ParserError, ValueError):
        return "", []
    if any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
        # libxml2 silently drops everything past its depth limit; refuse rather than lose text.
        raise ExtractionError(f"{what} nested too deeply (over 2048 levels): refused rather than truncated")
    head_title = root.find(".//title")
    body = root.find("body")
    out = _Blocks()
    _walk(body if body is not None else root, out, 0)
    out.flush()
    return (_collapse(_text_of(head_title)) if head_title is not None else ""), out.blocks


class HtmlExtractor:
    name = "html"
    version = "1"
    suffixes: tuple[str, ...] = (".html", ".htm", ".xhtml")

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        if not data.strip():
            raise ExtractionError("empty file: no text to index")
        if b"\x00" in data[:65536]:
            raise ExtractionError("binary data, not HTML (NUL bytes)")
        head_title, blocks = html_blocks(data)
        if not blocks:
            raise ExtractionError("no readable text in the HTML body")

        parts: list[str] = []
        heads: list[tuple[str, int, int]] = []  # (title, start, body_start)
        pos = 0
        for kind, text in blocks:
            if parts:
                pos += 2
            if kind in _SECTION_TAGS:
                heads.append((text, pos, pos + len(text)))
            parts.append(text)
            pos += len(text)
        canonical = "\n\n".join(parts)

        sections: list[Section] = []
        if not heads or heads[0][1] > 0:
            sections.append(Section("", 0, 0, heads[0][1] if heads else len(canonical)))
        for i, (head, start, body_start) in enumerate(heads):
            end = heads[i + 1][1] if i + 1 < len(heads) else len(canonical)
            sections.append(Section(head, start, body_start, end))

        if title is None:
            title = head_title or (heads[0][0] if heads else path.stem)
        return Extracted(canonical, title, sections, self.name, self.version)
