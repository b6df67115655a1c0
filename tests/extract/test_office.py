"""DOCX, ODT, EPUB: headings as sections, tables row by row, citations by section and character range."""

from __future__ import annotations

from pathlib import Path

from formats_util import check_contract, extract, sample
from hostile_files import sample_docx, sample_epub, sample_odt

from citerag.answer.citations import locate


def test_docx_real_file_tables_row_by_row() -> None:
    ext = sample("docx-python-docx-paras-tables.docx")
    check_contract(ext)
    assert ext.locators == []  # no pages: citations use "#char=a,b" and the section
    assert "Lorem ipsum dolor sit amet, consectetur adipiscing elit." in ext.text
    # the nested table's cells stay in their outer cell, in order
    assert "Text before Table Between Text after" in ext.text
    assert ext.text.endswith("Donec semper facilisis metus finibus malesuada.")


def test_docx_headings_become_sections(tmp_path: Path) -> None:
    ext = extract(tmp_path / "notes.docx", sample_docx())
    check_contract(ext)
    assert ext.title == "Field notes"
    assert [s.title for s in ext.sections] == ["Field notes", "Introduction", "Counts"]
    assert "Species | Count\nCormorant | 14\nGrey heron | 3" in ext.text
    assert locate(ext.locators, 0, 5) is None


def test_odt_real_manual_has_its_headings() -> None:
    ext = sample("odt-odfpy-api-manual.odt")
    check_contract(ext, "E")
    assert ext.title == "Application Programmer's Interface for ODFPY"
    assert len(ext.sections) > 500
    assert {"Introduction", "About OpenDocument", "Creating a document"} <= {s.title for s in ext.sections}


def test_odt_synthetic_heading_and_table(tmp_path: Path) -> None:
    ext = extract(tmp_path / "tides.odt", sample_odt())
    check_contract(ext)
    assert [s.title for s in ext.sections] == ["Tide tables"]
    assert ext.text.endswith("Day | High water\nMonday | 06:12")


def test_epub_chapters_in_spine_order() -> None:
    ext = sample("epub-live-manual-en.epub")
    check_contract(ext, "E")
    assert ext.title == "Live Systems Manual" and not ext.warnings
    titles = [s.title for s in ext.sections]
    assert titles.index("1. About this manual") < titles.index("About the Live Systems Project")
    assert "live-build" in ext.text


def test_epub_synthetic_chapters_as_sections(tmp_path: Path) -> None:
    ext = extract(tmp_path / "guide.epub", sample_epub())
    check_contract(ext)
    assert ext.title == "Harbour guide"
    assert [s.title for s in ext.sections] == ["Arrival", "Departure"]
