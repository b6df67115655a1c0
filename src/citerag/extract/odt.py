"""ODT (OpenDocument text): content.xml read with zip + lxml (safe.py).

<text:h> headings become sections; paragraphs and list items are blocks; tables are kept row by row;
tracked deletions, notes and annotations are left out. Citations use the section and "#char=a,b".
"""

from __future__ import annotations

from pathlib import Path

import lxml.etree

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder, table_text
from citerag.extract.safe import SafeZip, local
from citerag.types import Extracted

_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_MAX_DEPTH = 100


def odf_text(el: lxml.etree._Element) -> str:
    """Text of an ODF paragraph-like element: <text:s/> as spaces, tabs and line breaks kept, notes left out."""
    parts: list[str] = []

    def walk(e: lxml.etree._Element, depth: int) -> None:
        if e.text:
            parts.append(e.text)
        for child in e:
            tag = local(child.tag)
            if tag == "s":
                parts.append(" " * min(int(child.get(f"{{{_TEXT}}}c", "1") or 1), 100))
            elif tag == "tab":
                parts.append("\t")
            elif tag == "line-break":
                parts.append("\n")
            elif tag not in ("note", "annotation", "bookmark-ref") and depth < _MAX_DEPTH:
                walk(child, depth + 1)
            if child.tail:
                parts.append(child.tail)

    walk(el, 0)
    return "".join(parts)


def _odt_table(table: lxml.etree._Element) -> str:
    return table_text(((odf_text(p) for p in tc.iter(f"{{{_TEXT}}}p", f"{{{_TEXT}}}h"))
                       for tc in tr if local(tc.tag) == "table-cell")
                      for tr in table.iter("{urn:oasis:names:tc:opendocument:xmlns:table:1.0}table-row"))


class OdtExtractor:
    name = "odt"
    version = "1"
    suffixes: tuple[str, ...] = (".odt",)

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        z = SafeZip(data, "ODT")
        if not z.has("content.xml"):
            raise ExtractionError("not a valid ODT file: content.xml is missing")
        root = z.xml("content.xml")
        text_root = next((el for el in root.iter("{urn:oasis:names:tc:opendocument:xmlns:office:1.0}text")), None)
        if text_root is None:
            raise ExtractionError("not an ODT text document: no office:text body")
        out = TextBuilder()
        self._walk(text_root, out, 0)
        if title is None:
            title = out.first_heading or path.stem
            if z.has("meta.xml"):
                for el in z.xml("meta.xml").iter("{http://purl.org/dc/elements/1.1/}title"):
                    if (el.text or "").strip():
                        title = " ".join((el.text or "").split())
        return out.build(title, self.name, self.version, what="ODT document")

    def _walk(self, parent: lxml.etree._Element, out: TextBuilder, depth: int) -> None:
        if depth > _MAX_DEPTH:
            raise ExtractionError(f"ODT nesting deeper than {_MAX_DEPTH} levels: refused")
        for el in parent:
            tag = local(el.tag)
            if tag == "h":
                text = " ".join(odf_text(el).split())
                if text:
                    out.heading(text)
            elif tag == "p":
                out.block(odf_text(el))
            elif tag == "table":
                out.block(_odt_table(el))
            elif tag in ("list", "list-item", "list-header", "section", "index-body", "deletion"):
                if tag != "deletion":
                    self._walk(el, out, depth + 1)
            elif tag in ("table-of-content", "alphabetical-index", "sequence-decls", "tracked-changes"):
                continue
