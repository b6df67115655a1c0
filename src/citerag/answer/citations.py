"""The server owns every link: [n] maps to a citation built from the store, never from model text.

A citation's locator comes from the document's locator map (built by its extractor, stored with the
document): the spans that overlap the quoted range [start, end) give

- PDF pages:         fragment "#page=N" (PDF Open Parameters; N = the page where the quote starts),
                     label "p. 12" or "p. 12–13"; the lowest OCR confidence of the pages touched, if any;
- transcript cues:   fragment "#t=a,b" in seconds (W3C Media Fragments), label "02:12–02:38";
- spreadsheet rows:  fragment "#sheet=Sheet1&range=A12:F30", label "Sheet1!A12:F30";
- no map (text, Markdown, HTML): fragment "#char=a,b" (RFC 5147), label the section title.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote

from citerag.types import Citation, Hit, Locator


@dataclass(frozen=True)
class Located:
    label: str
    fragment: str
    ocr_confidence: float | None = None


def locator_label(hit: Hit) -> str:
    return hit.chunk.section or hit.document.title or hit.document.name


def fragment(start: int, end: int) -> str:
    return f"#char={start},{end}"  # RFC 5147 text fragment


def column_letters(col: int) -> str:
    """1 -> A, 26 -> Z, 27 -> AA."""
    out = ""
    while col > 0:
        col, rem = divmod(col - 1, 26)
        out = chr(65 + rem) + out
    return out


def clock(seconds: float) -> str:
    """Seconds as mm:ss, or h:mm:ss from an hour on."""
    s = int(math.floor(seconds + 1e-9))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def _seconds(t: float) -> str:
    return f"{t:.3f}".rstrip("0").rstrip(".")


def _sheet_ref(sheet: str) -> str:
    return sheet if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", sheet) else "'" + sheet.replace("'", "''") + "'"


def overlapping(locators: list[Locator], start: int, end: int) -> list[Locator]:
    """The spans that overlap [start, end); if none does, the last span before `start`, if any."""
    if not locators:
        return []
    i = bisect.bisect_right([loc.start for loc in locators], start) - 1
    found = []
    for loc in locators[max(i, 0):]:
        if loc.start >= end:
            break
        if loc.end > start:
            found.append(loc)
    if not found and i >= 0:
        found = [locators[i]]
    return found


def locate(locators: list[Locator], start: int, end: int) -> Located | None:
    """The label and fragment for the canonical range [start, end), or None when the map has nothing."""
    spans = overlapping(locators, start, end)
    if not spans:
        return None
    first = spans[0]
    if first.page is not None:
        pages = [s.page for s in spans if s.page is not None]
        lo, hi = pages[0], max(pages)
        confidences = [s.ocr_confidence for s in spans if s.ocr_confidence is not None]
        return Located(f"p. {lo}" if hi == lo else f"p. {lo}–{hi}", f"#page={lo}",
                       min(confidences) if confidences else None)
    if first.t_start is not None:
        t0 = min(s.t_start for s in spans if s.t_start is not None)
        t1 = max(s.t_end if s.t_end is not None else s.t_start for s in spans if s.t_start is not None)
        return Located(f"{clock(t0)}–{clock(t1)}", f"#t={_seconds(t0)},{_seconds(t1)}")
    if first.sheet is not None and first.row is not None:
        same = [s for s in spans if s.sheet == first.sheet and s.row is not None]
        rows = [s.row for s in same if s.row is not None]
        cols = [c for s in same for c in (s.col_first, s.col_last) if c is not None] or [1]
        a = f"{column_letters(min(cols))}{min(rows)}"
        b = f"{column_letters(max(cols))}{max(rows)}"
        cells = a if a == b else f"{a}:{b}"
        return Located(f"{_sheet_ref(first.sheet)}!{cells}",
                       f"#sheet={quote(first.sheet, safe='')}&range={cells}")
    return None


def cite(hits: list[Hit], canonical_text: Callable[[int], str]) -> list[Citation]:
    """Number the hits [1..n]; each quote is the chunk's content and is checked against the document."""
    citations: list[Citation] = []
    texts: dict[int, str] = {}
    for hit in hits:
        c = hit.chunk
        if c.document_id not in texts:
            texts[c.document_id] = canonical_text(c.document_id)
        if texts[c.document_id][c.start:c.end] != c.content:
            raise AssertionError(f"chunk {c.id} does not match its document's text at {c.start}:{c.end}")
        located = locate(hit.document.locators, c.start, c.end)
        citations.append(Citation(
            index=len(citations) + 1, document_id=c.document_id, document_name=hit.document.name,
            source_path=hit.document.source_path,
            locator_label=located.label if located else locator_label(hit),
            fragment=located.fragment if located else fragment(c.start, c.end), start=c.start, end=c.end,
            quote=c.content, cosine_distance=hit.cosine_distance,
            ocr_confidence=located.ocr_confidence if located else None, section=c.section))
    return citations


def typed_locator(citation: Citation) -> dict[str, Any]:
    """The citation's locator as an object an API client can use without parsing fragments:
    {"type": "char", "start", "end"} | {"type": "page", "page"} | {"type": "time", "start", "end"} (seconds) |
    {"type": "cell", "sheet", "range"}. Every type also carries the canonical range as char_start/char_end."""
    kind, _, value = citation.fragment.lstrip("#").partition("=")
    chars = {"char_start": citation.start, "char_end": citation.end}
    if kind == "page":
        return {"type": "page", "page": int(value), **chars}
    if kind == "t":
        t0, _, t1 = value.partition(",")
        return {"type": "time", "start": float(t0), "end": float(t1), **chars}
    if kind == "sheet":
        query = parse_qs(citation.fragment.lstrip("#"))
        return {"type": "cell", "sheet": query["sheet"][0], "range": query["range"][0], **chars}
    return {"type": "char", "start": citation.start, "end": citation.end}


# Words a text directive takes from each end of a quote: enough to be unique on a page, short enough to stay in
# one block element (a directive's terms must not cross block boundaries, and the canonical text breaks lines there).
_DIRECTIVE_WORDS = 6


def text_directive(quote_text: str) -> str:
    """A URL text fragment (`#:~:text=start,end`, WICG Scroll To Text Fragment) that makes a browser opening the
    original HTML page scroll to the quote and highlight it: the first words of its first line and the last
    words of its last line. Dashes, commas and ampersands are escaped, as the directive's syntax requires."""
    lines = [line.split() for line in quote_text.splitlines() if line.strip()]
    if not lines:
        return ""

    def term(words: list[str]) -> str:
        return quote(" ".join(words), safe="").replace("-", "%2D")

    first, last = lines[0], lines[-1]
    if len(lines) == 1 and len(first) <= 2 * _DIRECTIVE_WORDS:
        return "#:~:text=" + term(first)
    return "#:~:text=" + term(first[:_DIRECTIVE_WORDS]) + "," + term(last[-_DIRECTIVE_WORDS:])
