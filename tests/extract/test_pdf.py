"""PDF: pages kept and cited, headers/footers gone, two columns in order, hyphens joined, scans OCR'd."""

from __future__ import annotations

import json
import re

import pytest
from formats_util import DEBIAN_PDF, DEV_SET, SAMPLES, check_contract, extract, find, sample, ws

from citerag.answer.citations import locate
from citerag.chunk import chunk_extracted
from citerag.extract.ocr import TESSERACT_MISSING, tesseract_available
from citerag.types import Extracted
from system_tools import needs_tesseract


@pytest.fixture(scope="module")
def debian() -> Extracted:
    return extract(DEBIAN_PDF)


def test_debian_pdf_pages_sections_and_contract(debian: Extracted) -> None:
    assert debian.extractor == "pdf" and debian.title == "Debian Reference"
    # Every page has text; page 1, the cover, only through OCR (test_debian_pdf_cover_is_ocrd).
    ocr = tesseract_available()
    assert [loc.page for loc in debian.locators] == list(range(1 if ocr else 2, 262))
    assert ocr or debian.warnings == [f"image-only pages were not read: {TESSERACT_MISSING}"]
    check_contract(debian, "E")
    titles = {s.title for s in debian.sections}
    assert {"1.2.7 Links", "1.1 Console basics", "1.1.4 The root shell prompt"} <= titles  # from bookmarks
    assert not re.search("[“”‘’ﬁﬂ]", debian.text)  # curly quotes and ligatures mapped to ASCII


@needs_tesseract
def test_debian_pdf_cover_is_ocrd(debian: Extracted) -> None:
    cover = debian.locators[0]
    assert cover.page == 1 and cover.ocr_confidence is not None and 0 < cover.ocr_confidence <= 100
    assert "debian" in debian.text[cover.start:cover.end].lower()  # the logo's word, under the swirl
    assert debian.warnings == []


def test_debian_pdf_running_headers_never_reach_chunks(debian: Extracted) -> None:
    header = re.compile(r"Debian Reference (\d+ / \d+|[ivxlc]+)\s*$", re.M)
    assert not header.search(debian.text)
    assert all(not header.search(c.content) and not header.search(c.text) for c in chunk_extracted(debian))


def test_debian_pdf_needles_found_on_their_pages(debian: Extracted) -> None:
    questions = [json.loads(line) for line in (DEV_SET / "questions.jsonl").read_text().splitlines() if line]
    needles = {q["truth"]: q["needle"] for q in questions}
    chunks = chunk_extracted(debian)
    assert all(any(ws(n) in ws(c.content) for c in chunks) for n in needles.values())  # 40 of 40
    # The pages pypdf finds (pdf_pages.json, 1-based physical) are where the citation must point.
    pages = {k: v for k, v in json.loads((DEV_SET / "pdf_pages.json").read_text()).items() if v}
    assert len(pages) == 5
    for truth, page in pages.items():
        start, end = find(debian.text, needles[truth])
        located = locate(debian.locators, start, end)
        assert located is not None and located.fragment == f"#page={page}", truth
        assert located.label.startswith(f"p. {page}")


def test_quote_spanning_two_pages_is_labelled_with_both(debian: Extracted) -> None:
    p12 = next(loc for loc in debian.locators if loc.page == 40)
    located = locate(debian.locators, p12.end - 20, p12.end + 30)
    assert located is not None and located.label == "p. 40–41" and located.fragment == "#page=40"


def test_two_column_paper_reads_left_column_then_right() -> None:
    ext = sample("pdf-2col-paper-jner2016-ccby.pdf")
    check_contract(ext)
    page2 = next(loc for loc in ext.locators if loc.page == 2)
    body = ext.text[page2.start:page2.end]
    left_end = body.index("automatic identification of")
    right_start = body.index("selective electrode configurations of a multi-contact array")
    assert 0 < right_start - left_end < 60  # the right column follows the left one, nothing in between
    # end-of-line hyphenation joined: "De-/pending", "in-/duced"
    assert "Depending on the shape" in ext.text and "induced in the motor axons" in ws(ext.text)
    assert "\ufffe" not in ext.text and "\x02" not in ext.text
    # the running footer repeats on every page with its page number, and is gone
    assert "Journal of NeuroEngineering and Rehabilitation (2016) 13:22 Page" not in ext.text


def test_table_rows_stay_rows_and_chunks_cut_between_rows() -> None:
    ext = sample("pdf-table-mtcars-3p.pdf")
    chunks = check_contract(ext)["E"]
    assert "\n5.1 3.5 1.4 0.2 setosa\n" in ext.text
    text = ext.text
    for c in chunks:  # chunks hold whole rows: each starts at a line start and ends at a line end
        assert (c.start == 0 or text[c.start - 1] == "\n") and (c.end == len(text) or text[c.end] == "\n")
    labels = [locate(ext.locators, c.start, c.end) for c in chunks]
    assert {lb.fragment for lb in labels if lb} == {"#page=1", "#page=2"}
    assert any(lb and lb.label == "p. 2–3" for lb in labels)


@needs_tesseract
def test_scanned_pdf_becomes_searchable_text_with_a_confidence() -> None:
    ext = sample("pdf-scanned-2col-linn.pdf")
    check_contract(ext)
    assert len(ext.locators) == 1
    loc = ext.locators[0]
    assert loc.page == 1 and loc.ocr_confidence is not None and 60 <= loc.ocr_confidence <= 100
    truth = set(re.findall(r"[A-Za-z]{4,}", (SAMPLES / "pdf-scanned-2col-linn.groundtruth.txt").read_text()))
    found = set(re.findall(r"[A-Za-z]{4,}", ext.text))
    assert len(truth & found) >= 0.85 * len(truth)
    located = locate(ext.locators, 0, 50)
    assert located is not None and located.fragment == "#page=1"
    assert located.ocr_confidence == loc.ocr_confidence


def test_scanned_pdf_without_tesseract_fails_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    import citerag.extract.pdf as pdf
    from citerag.errors import ExtractionError

    monkeypatch.setattr(pdf, "tesseract_available", lambda: False)
    with pytest.raises(ExtractionError, match="^no text layer, and no OCR to read its images: "
                                              "tesseract not installed: apt-get install tesseract-ocr$"):
        extract(SAMPLES / "pdf-scanned-2col-linn.pdf")
