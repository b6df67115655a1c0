"""DOCX (WordprocessingML): word/document.xml read with zip + lxml (safe.py).

Headings become sections (paragraph styles named "Title" or "heading N" in styles.xml, or with an
outline level); each paragraph is a block; tables are kept row by row ("cell | cell"), a nested
table's text staying inside its cell. DOCX has no stable page numbers, so citations use the
section title and "#char=a,b".
"""

from __future__ import annotations

from pathlib import Path

import lxml.etree

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder, table_text
from citerag.extract.safe import SafeZip, local
from citerag.types import Extracted

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MAX_DEPTH = 100


def _w(name: str) -> str:
    return f"{{{_W}}}{name}"


def _docx_text(el: lxml.etree._Element) -> str:
    parts: list[str] = []
    for node in el.iter():
        tag = local(node.tag)
        if tag == "t":
            parts.append(node.text or "")
        elif tag == "tab":
            parts.append("\t")
        elif tag in ("br", "cr"):
            parts.append("\n")
    return "".join(parts)


def _docx_heading_styles(z: SafeZip) -> dict[str, int]:
    """Paragraph style id -> heading level (0 for Title), from styles.xml."""
    levels: dict[str, int] = {}
    if not z.has("word/styles.xml"):
        return levels
    for style in z.xml("word/styles.xml").iter(_w("style")):
        sid = style.get(_w("styleId")) or ""
        name_el = style.find(_w("name"))
        name = (name_el.get(_w("val")) if name_el is not None else "") or ""
        name = name.lower()
        outline = style.find(f"{_w('pPr')}/{_w('outlineLvl')}")
        if name == "title":
            levels[sid] = 0
        elif name.startswith("heading ") and name[8:].isdigit():
            levels[sid] = int(name[8:])
        elif outline is not None and (outline.get(_w("val")) or "9").isdigit() and int(outline.get(_w("val")) or 9) < 9:
            levels[sid] = int(outline.get(_w("val")) or 0) + 1
    return levels


def _docx_table(tbl: lxml.etree._Element) -> str:
    return table_text(((_docx_text(p) for p in tc.iter(_w("p"))) for tc in tr if local(tc.tag) == "tc")
                      for tr in tbl if local(tr.tag) == "tr")


class DocxExtractor:
    name = "docx"
    version = "1"
    suffixes: tuple[str, ...] = (".docx", ".docm")

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        z = SafeZip(data, "DOCX")
        if not z.has("word/document.xml"):
            raise ExtractionError("not a valid DOCX file: word/document.xml is missing")
        root = z.xml("word/document.xml")
        headings = _docx_heading_styles(z)
        body = root.find(_w("body"))
        if body is None:
            raise ExtractionError("not a valid DOCX file: the document has no body")
        out = TextBuilder()
        self._walk(body, out, headings, 0)
        if title is None:
            title = out.first_heading or path.stem
            if z.has("docProps/core.xml"):
                for el in z.xml("docProps/core.xml"):
                    if local(el.tag) == "title" and (el.text or "").strip():
                        title = " ".join((el.text or "").split())
        return out.build(title, self.name, self.version, what="DOCX document")

    def _walk(self, parent: lxml.etree._Element, out: TextBuilder, headings: dict[str, int], depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ExtractionError(f"DOCX nesting deeper than {_MAX_DEPTH} levels: refused")
        for el in parent:
            tag = local(el.tag)
            if tag == "p":
                text = _docx_text(el).strip()
                style = el.find(f"{_w('pPr')}/{_w('pStyle')}")
                sid = style.get(_w("val")) if style is not None else None
                outline = el.find(f"{_w('pPr')}/{_w('outlineLvl')}")
                is_heading = (sid in headings) or (outline is not None and (outline.get(_w("val")) or "9") < "9")
                if text and is_heading and len(text) < 300:
                    out.heading(text)
                else:
                    out.block(text)
            elif tag == "tbl":
                out.block(_docx_table(el))
            elif tag in ("sdt", "sdtContent", "customXml", "ins", "smartTag"):
                self._walk(el, out, headings, depth + 1)
