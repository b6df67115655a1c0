"""PDF: the text layer through pdfium (pypdfium2, Apache-2.0/BSD), pages kept, scanned pages OCR'd.

Per page, pdfium gives lines (with the characters' boxes); from them:

- reading order: a page whose lines fall into two columns is read band by band (a band ends at a
  line that spans both columns), left column before right;
- paragraphs: a vertical gap well above the page's usual line pitch starts a new paragraph, and so
  does a line after a short one that ends a sentence;
- running headers and footers: lines among the top or bottom two of a page whose text, digits
  masked, repeats on many pages ("Debian Reference 13 / 233") are dropped, as are bare page numbers;
- hyphenation: pdfium marks a line-end hyphen it joined with U+FFFE; the mark is removed, so the
  word is whole ("De-\\npending" -> "Depending"); a line ending in "-" before a lowercase letter
  is joined the same way;
- quotes: typesetters print ASCII quotes as curly ones; “ ” ‘ ’ become " and ' (one character for
  one, so nothing shifts) and ligatures (ﬁ, ﬂ…) are spelt out, so that what a person types is found;
- tables: pdfium keeps a table row on one line, so rows stay rows ("5.1 3.5 1.4 0.2 setosa"); in a run
  of lines that look like table rows (several cells, numbers among them) each row is its own paragraph,
  so the chunker cuts between rows, never inside one;
- sections: bookmark titles found as a line on their page become headings;
- pages with no text layer are rendered at 300 dpi (less for huge pages: at most 40 megapixels) and
  read by Tesseract; the page's confidence is the mean word confidence (0-100), kept in the locator
  map and shown in citations. At most 50 pages and 600 s of OCR per document; the rest is skipped
  with a warning.

The locator map holds one span per page: canonical [start, end) -> page number (1-based physical
page), plus the OCR confidence for OCR'd pages.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder
from citerag.extract.ocr import TESSERACT_MISSING, OcrPage, ocr_image, tesseract_available
from citerag.types import Extracted

_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'", "‚": "'",
                         "ﬀ": "ff", "ﬁ": "fi", "ﬂ": "fl", "ﬃ": "ffi", "ﬄ": "ffl", "ﬅ": "st", "ﬆ": "st",
                         "\u00a0": " ", "\x00": ""})
_DIGITS = re.compile(r"\d+")
# A page number at either end of a line: "13 / 233", "Page 4 of 9", "xii".
_NUMBER_END = re.compile(r"(?i)(^|\s)(page\s*)?(\d+|[ivxlcdm]+)(\s*(/|of)\s*\d+)?$")
_NUMBER_START = re.compile(r"(?i)^(page\s*)?(\d+|[ivxlcdm]+)(\s*(/|of)\s*\d+)?(\s|$)")
_PAGE_NUMBER = re.compile(r"(?i)^(page\s*)?(\d+|[ivxlcdm]+)(\s*(/|of)\s*\d+)?$")
_MIN_TEXT_CHARS = 16  # a page with fewer non-blank characters counts as image-only
MAX_OCR_PAGES = 50
MAX_OCR_SECONDS = 600.0  # per document: past this, remaining image-only pages are skipped with a warning
OCR_DPI = 300
MAX_OCR_PIXELS = 40_000_000  # a huge page is rendered at a lower resolution, never past this
MAX_PAGES = 20_000


@dataclass
class _Line:
    text: str
    left: float
    right: float
    bottom: float
    top: float
    last_top: float  # the top of the line's last visual line: lower than `top` when pdfium joined a hyphenation


@dataclass
class _Page:
    number: int
    lines: list[_Line] = field(default_factory=list)
    ocr: OcrPage | None = None


def _clean(s: str) -> str:
    return s.translate(_QUOTES).replace("\ufffe", "").replace("\u0002", "").replace("\xad", "")


def _page_lines(textpage: Any) -> list[_Line]:
    text: str = textpage.get_text_range()
    if len(text) != textpage.count_chars():  # surrogate pairs shift indices: boxes only approximate
        text = text[:textpage.count_chars()]
    lines: list[_Line] = []
    pos = 0
    for raw in text.split("\r\n"):
        i, j = pos, pos + len(raw)
        pos = j + 2
        stripped = raw.strip()
        if not stripped:
            continue
        a = i + (len(raw) - len(raw.lstrip()))
        b = i + len(raw.rstrip()) - 1
        # First and last character give the vertical extent; the horizontal extent is the widest of
        # a sample of characters (pdfium's character order within a line is not always left to right).
        step = max(1, (b - a) // 12)
        try:
            boxes = [textpage.get_charbox(k) for k in (*range(a, b, step), b)]
        except Exception:  # a box pdfium cannot give: keep the text, guess the geometry
            boxes = [(0.0, 0.0, 0.0, 0.0)]
        # Tops differ by glyph ("c" is lower than "T"): a visual line's top is the highest top near it.
        ft, lt = boxes[0][3], boxes[-1][3]
        top = max(x[3] for x in boxes if x[3] <= ft + 4)
        last_top = max(x[3] for x in boxes if lt - 4 <= x[3] <= lt + 4)
        joined = "\ufffe" in raw or "\x02" in raw  # pdfium joined a hyphenated line: two visual lines
        lines.append(_Line(stripped, min(x[0] for x in boxes), max(x[2] for x in boxes),
                           min(x[1] for x in boxes), top, min(top, last_top) if joined else top))
    return lines


def _reading_order(lines: list[_Line], width: float) -> list[_Line]:
    """Two-column pages read left column then right, band by band; others keep pdfium's order."""
    if len(lines) < 10 or width <= 0:
        return lines
    mid = width / 2
    left = [ln for ln in lines if ln.right <= mid + 4]
    right = [ln for ln in lines if ln.left >= mid - 4]
    if len(left) < 5 or len(right) < 5 or len(left) + len(right) < 0.6 * len(lines):
        return lines
    # Columns of prose are wide lines on both sides; a table's cells are narrow: leave tables alone.
    if sum(ln.right - ln.left >= 0.3 * width for ln in left) < 5 or \
            sum(ln.right - ln.left >= 0.3 * width for ln in right) < 5:
        return lines
    spanning = sorted((ln for ln in lines if ln.right > mid + 4 and ln.left < mid - 4), key=lambda ln: -ln.top)
    out: list[_Line] = []
    ceiling = math.inf
    for cut in [*spanning, None]:
        floor = cut.top if cut else -math.inf
        band = [ln for ln in lines if floor < ln.top <= ceiling and ln is not cut
                and not (ln.right > mid + 4 and ln.left < mid - 4)]
        out += sorted((ln for ln in band if ln.left < mid - 4), key=lambda ln: -ln.top)
        out += sorted((ln for ln in band if ln.left >= mid - 4), key=lambda ln: -ln.top)
        if cut:
            out.append(cut)
            ceiling = cut.top
    return out if len(out) == len(lines) else lines


def _furniture(pages: list[_Page]) -> set[tuple[int, int]]:
    """(page index, line index) of running headers/footers and page numbers."""
    if len(pages) < 2:
        return set()
    zone: dict[tuple[int, int], str] = {}
    for pi, page in enumerate(pages):
        if page.ocr or not page.lines:
            continue
        by_height = sorted(range(len(page.lines)), key=lambda i: -page.lines[i].top)
        for li in {*by_height[:2], *by_height[-2:]}:
            norm = " ".join(page.lines[li].text.split())
            norm = _NUMBER_START.sub("# ", _NUMBER_END.sub(" #", norm))
            zone[(pi, li)] = _DIGITS.sub("#", norm)
    counts = Counter(zone.values())
    text_pages = sum(1 for p in pages if p.lines and not p.ocr)
    need = max(2, math.ceil(0.3 * text_pages))
    drop = set()
    for key, norm in zone.items():
        text = pages[key[0]].lines[key[1]].text.strip()
        if counts[norm] >= need or (_PAGE_NUMBER.match(text) and counts[norm] >= 2):
            drop.add(key)
    return drop


def _paragraphs(lines: list[_Line]) -> list[str]:
    """Group lines into paragraphs by vertical gaps; line-end hyphens before lowercase are joined."""
    if not lines:
        return []
    pitches = [a.last_top - b.top for a, b in zip(lines, lines[1:], strict=False) if 0 < a.last_top - b.top < 40]
    pitch = statistics.median(pitches) if pitches else 12.0
    paras: list[list[str]] = [[lines[0].text]]
    for prev, ln in zip(lines, lines[1:], strict=False):
        gap = prev.last_top - ln.top
        if gap > 1.45 * pitch or gap < -pitch:  # a wide gap, or a jump up (next column)
            paras.append([ln.text])
        elif prev.text[-1:] in ".!?:" and prev.right < ln.right - 20 and abs(prev.left - ln.left) < 40:
            paras.append([ln.text])  # a short line ending a sentence, then a full one: a new paragraph
        else:
            paras[-1].append(ln.text)
    out = []
    for para in paras:
        if _table_like(para):  # each row its own paragraph, so chunks are runs of whole rows
            out.extend(para)
            continue
        text = para[0]
        for nxt in para[1:]:
            if re.search(r"[a-z]-$", text) and nxt[:1].islower():
                text = text[:-1] + nxt
            else:
                text += "\n" + nxt
        out.append(text)
    return out


_NUMERIC = re.compile(r"^[-+(]?[$€£]?\d[\d.,:%/]*\)?$")


def _table_like(lines: list[str]) -> bool:
    """Three or more lines, most of them rows of several cells at least two of which are numbers."""
    if len(lines) < 3:
        return False
    rows = sum(1 for ln in lines if len(ln.split()) >= 3 and sum(bool(_NUMERIC.match(t)) for t in ln.split()) >= 2)
    return rows >= 0.6 * len(lines)


def _headings(doc: Any) -> dict[int, list[str]]:
    """Bookmark titles (three levels deep) by 0-based page index."""
    found: dict[int, list[str]] = {}
    try:
        for item in doc.get_toc(max_depth=16):
            dest = item.get_dest() if item.level <= 2 else None
            index = dest.get_index() if dest is not None else None
            title = " ".join(_clean(item.get_title() or "").split())
            if index is not None and title:
                found.setdefault(index, []).append(title)
    except Exception:  # a broken outline costs the sections, never the text
        return {}
    return found


_NUMBERING = re.compile(r"(?i)^(chapter|appendix|part|section)?\s*[\dA-Z]{0,3}(\.\d+)*\.?\s+")


def _heading_match(line: str, titles: list[str]) -> str | None:
    """The bookmark title this one-line paragraph is the heading of ("1.2.7 Links" for "Links")."""
    for t in titles:
        if line == t or (line.endswith(t) and _NUMBERING.fullmatch(line[:len(line) - len(t)])):
            return t
    return None


class PdfExtractor:
    name = "pdf"
    version = "1"
    suffixes: tuple[str, ...] = (".pdf",)

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        import pypdfium2 as pdfium

        if not data.strip():
            raise ExtractionError("empty file: no text to index")
        if not data.lstrip()[:1024].startswith(b"%PDF") and b"%PDF-" not in data[:1024]:
            raise ExtractionError("not a PDF (no %PDF header)")
        try:
            doc = pdfium.PdfDocument(data)
        except pdfium.PdfiumError as exc:
            msg = str(exc)
            if "password" in msg.lower():
                raise ExtractionError("encrypted PDF: it needs a password, which citerag does not have") from None
            raise ExtractionError(f"not a readable PDF (corrupt or truncated: {msg})") from None
        try:
            return self._extract(doc, path, title)
        finally:
            doc.close()

    def _extract(self, doc: Any, path: Path, title: str | None) -> Extracted:
        if len(doc) > MAX_PAGES:
            raise ExtractionError(f"PDF has {len(doc)} pages, over the limit of {MAX_PAGES}")
        warnings: list[str] = []
        deadline = time.monotonic() + MAX_OCR_SECONDS
        pages: list[_Page] = []
        ocr_budget = MAX_OCR_PAGES
        ocr_missing = False
        ocr_skipped = 0
        for index in range(len(doc)):
            page = doc[index]
            try:
                textpage = page.get_textpage()
                lines = _page_lines(textpage)
                textpage.close()
                lines = _reading_order(lines, page.get_width())
                entry = _Page(index + 1, lines)
                if sum(len(ln.text.strip()) for ln in lines) < _MIN_TEXT_CHARS and _has_images(page):
                    if not tesseract_available():
                        ocr_missing = True
                    elif ocr_budget > 0 and time.monotonic() < deadline:
                        ocr_budget -= 1
                        entry.ocr = self._ocr(page, index + 1, warnings)
                        entry.lines = []
                    else:
                        ocr_skipped += 1
                pages.append(entry)
            finally:
                page.close()
        if ocr_missing:
            warnings.append(f"image-only pages were not read: {TESSERACT_MISSING}")
        if ocr_skipped:
            warnings.append(f"OCR limits ({MAX_OCR_PAGES} pages, {MAX_OCR_SECONDS:g} s per document) reached: "
                            f"{ocr_skipped} image-only page(s) were not read")

        drop = _furniture(pages)
        heads = _headings(doc)
        out = TextBuilder()
        previous_open = False  # the last paragraph of the previous page ran on (no sentence end)
        for pi, page in enumerate(pages):
            page_start: int | None = None
            if page.ocr is not None:
                paras = [_clean(p) for p in page.ocr.paragraphs]
                confidence: float | None = page.ocr.confidence
            else:
                kept = [ln for li, ln in enumerate(page.lines) if (pi, li) not in drop]
                for ln in kept:
                    ln.text = _clean(ln.text)
                paras = _paragraphs(kept)
                confidence = None
            titles = list(heads.get(pi, []))
            for k, para in enumerate(paras):
                one_line = " ".join(para.split())
                matched = _heading_match(one_line, titles) if titles and len(one_line) < 200 else None
                if matched is not None:
                    start = out.heading(one_line)[0]
                    titles.remove(matched)
                else:
                    sep = "\n" if k == 0 and previous_open and para[:1].islower() else None
                    placed = out.block(para, sep=sep)
                    if placed is None:
                        continue
                    start = placed[0]
                if page_start is None:
                    page_start = start
            if page_start is not None:
                loc: dict[str, Any] = {"page": page.number}
                if confidence is not None:
                    loc["ocr_confidence"] = round(confidence, 1)
                out.add_locator(page_start, out.length, **loc)
                last = paras[-1].rstrip() if paras else ""
                previous_open = bool(last) and last[-1:] not in ".!?:" and page.ocr is None
        if title is None:
            meta = ""
            try:
                meta = str(doc.get_metadata_dict().get("Title", "") or "")
            except Exception:
                meta = ""
            title = " ".join(_clean(meta).split()) or path.stem
        if out.empty and ocr_missing:
            raise ExtractionError(f"no text layer, and no OCR to read its images: {TESSERACT_MISSING}")
        return out.build(title, self.name, self.version, warnings, what="PDF (no text layer, nothing OCR'd)")

    def _ocr(self, page: Any, number: int, warnings: list[str]) -> OcrPage | None:
        try:
            width, height = page.get_size()
            scale = min(OCR_DPI / 72, math.sqrt(MAX_OCR_PIXELS / max(width * height, 1.0)))
            bitmap = page.render(scale=scale, grayscale=True)
            image = bitmap.to_pil()
        except Exception as exc:
            warnings.append(f"page {number}: could not render for OCR ({exc})")
            return None
        try:
            result = ocr_image(image)
        except ExtractionError as exc:
            warnings.append(f"page {number}: {exc}")
            return None
        finally:
            image.close()
            bitmap.close()
        return result


def _has_images(page: Any) -> bool:
    import pypdfium2.raw as raw

    try:
        return any(obj.type == raw.FPDF_PAGEOBJ_IMAGE for obj in page.get_objects(max_depth=3))
    except Exception:
        return True
