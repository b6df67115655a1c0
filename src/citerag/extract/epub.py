"""EPUB: the spine's XHTML documents in reading order, each a chapter; headings inside become sections.

The container and package (OPF) are parsed as untrusted XML (safe.py); each chapter's XHTML is read
with the HTML extractor's block walker (navigation dropped, tables row by row, <pre> kept). A chapter
that does not open with a heading gets one from the navigation title, or from its file name.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from urllib.parse import unquote

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder
from citerag.extract.html import _SECTION_TAGS, html_blocks
from citerag.extract.safe import SafeZip, local
from citerag.types import Extracted

_ENTITY_DECL = re.compile(rb"<!ENTITY", re.I)


def _chapter_blocks(data: bytes, what: str) -> tuple[str, list[tuple[str, str]]]:
    if _ENTITY_DECL.search(data):
        raise ExtractionError(f"{what} declares XML entities (possible entity bomb): refused")
    return html_blocks(data, what)


class EpubExtractor:
    name = "epub"
    version = "1"
    suffixes: tuple[str, ...] = (".epub",)

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        z = SafeZip(data, "EPUB")
        if not z.has("META-INF/container.xml"):
            raise ExtractionError("not a valid EPUB file: META-INF/container.xml is missing")
        container = z.xml("META-INF/container.xml")
        opf_path = next((el.get("full-path") for el in container.iter() if local(el.tag) == "rootfile"), None)
        if not opf_path or not z.has(opf_path):
            raise ExtractionError("not a valid EPUB file: its package document (OPF) is missing")
        opf = z.xml(opf_path)
        base = posixpath.dirname(opf_path)
        manifest = {el.get("id"): el for el in opf.iter() if local(el.tag) == "item"}
        spine = [el.get("idref") for el in opf.iter() if local(el.tag) == "itemref" and el.get("linear") != "no"]
        book_title = next((" ".join((el.text or "").split()) for el in opf.iter()
                           if local(el.tag) == "title" and (el.text or "").strip()), "")
        out = TextBuilder()
        warnings: list[str] = []
        seen: set[str] = set()
        for idref in spine:
            item = manifest.get(idref)
            if item is None:
                continue
            href = posixpath.normpath(posixpath.join(base, unquote(item.get("href", "").split("#", 1)[0])))
            if href in seen:
                continue
            seen.add(href)
            if "nav" in (item.get("properties") or "").split():
                continue  # the table of contents: navigation, not content
            if not z.has(href):
                warnings.append(f"chapter {href} is missing from the archive; skipped")
                continue
            head, blocks = _chapter_blocks(z.read(href), f"EPUB part {href}")
            if not blocks:
                continue
            if not any(kind in _SECTION_TAGS for kind, _ in blocks[:3]):
                out.heading(head or posixpath.splitext(posixpath.basename(href))[0])
            for kind, text in blocks:
                if kind in _SECTION_TAGS:
                    out.heading(text)
                else:
                    out.block(text)
        return out.build(title or book_title or path.stem, self.name, self.version, warnings, what="EPUB book")
