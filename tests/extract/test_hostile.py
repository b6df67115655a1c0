"""Hostile input: every case fails with a clear one-line reason, quickly and in bounded memory."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from formats_util import SAMPLES, extract
from hostile_files import BILLION_LAUGHS, hostile_files, zip_of, zip_with_big_member

from citerag.errors import ExtractionError
from citerag.extract.safe import parse_xml

CASES = hostile_files(SAMPLES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_file_fails_with_a_reason(name: str, tmp_path: Path) -> None:
    data, reason = CASES[name]
    tracemalloc.start()
    began = time.perf_counter()
    try:
        with pytest.raises(ExtractionError) as info:
            extract(tmp_path / name, data)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    message = str(info.value)
    assert reason in message and "\n" not in message and len(message) < 300
    assert time.perf_counter() - began < 10
    assert peak < 32 << 20, f"{name}: {peak / 1048576:.0f} MB allocated"  # bombs are never inflated


def test_declared_size_is_not_trusted(tmp_path: Path) -> None:
    """A part whose inflated size is within limits still stops at the per-part budget."""
    data = zip_with_big_member({"[Content_Types].xml": b"<Types/>"}, "word/document.xml", 2 << 20)
    with pytest.raises(ExtractionError, match="zip bomb"):
        extract(tmp_path / "x.docx", data)


def test_entities_refused_even_when_harmless() -> None:
    with pytest.raises(ExtractionError, match="entity"):
        parse_xml(b'<!DOCTYPE r [<!ENTITY a "x">]><r>&a;</r>', "test part")
    with pytest.raises(ExtractionError, match="entity bomb"):
        parse_xml(BILLION_LAUGHS, "test part")


def test_entity_bomb_in_a_sheet_part(tmp_path: Path) -> None:
    workbook = (b'<workbook xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main" xmlns:r="http://'
                b'schemas.openxmlformats.org/officeDocument/2006/relationships"><sheets><sheet name="S" sheetId="1"'
                b' r:id="rId1"/></sheets></workbook>')
    rels = (b'<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship '
            b'Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" '
            b'Target="worksheets/sheet1.xml"/></Relationships>')
    data = zip_of({"xl/workbook.xml": workbook, "xl/_rels/workbook.xml.rels": rels,
                   "xl/worksheets/sheet1.xml": BILLION_LAUGHS})
    with pytest.raises(ExtractionError, match="entity bomb"):
        extract(tmp_path / "b.xlsx", data)


def test_encrypted_zip_member(tmp_path: Path) -> None:
    data = bytearray(zip_of({"word/document.xml": b"<w:document/>"}))
    # set the "encrypted" flag bit in both the local and the central header
    for sig in (b"PK\x03\x04", b"PK\x01\x02"):
        at = data.find(sig)
        flag_at = at + (6 if sig == b"PK\x03\x04" else 8)
        data[flag_at] |= 1
    with pytest.raises(ExtractionError, match="encrypted"):
        extract(tmp_path / "enc.docx", bytes(data))


def test_invalid_utf8_is_kept_with_a_warning(tmp_path: Path) -> None:
    ext = extract(tmp_path / "old.csv", "name,city\nRené,Zürich\n".encode("cp1252"))
    assert "René | Zürich" in ext.text
    assert ext.warnings and "not valid UTF-8" in ext.warnings[0]


def test_ods_repeated_rows_do_not_explode(tmp_path: Path) -> None:
    content = ('<?xml version="1.0"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:'
               'office:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" xmlns:text="urn:oasis:'
               'names:tc:opendocument:xmlns:text:1.0"><office:body><office:spreadsheet><table:table table:name="T">'
               '<table:table-row><table:table-cell><text:p>head</text:p></table:table-cell></table:table-row>'
               '<table:table-row table:number-rows-repeated="1048000"><table:table-cell table:number-columns-'
               'repeated="16000"/></table:table-row><table:table-row table:number-rows-repeated="1000000">'
               '<table:table-cell table:number-columns-repeated="16000"><text:p>x</text:p></table:table-cell>'
               '</table:table-row></table:table></office:spreadsheet></office:body></office:document-content>')
    tracemalloc.start()
    try:
        ext = extract(tmp_path / "rep.ods", zip_of({"content.xml": content.encode()}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ext.locators[1].row == 1048002  # empty repeats advance the row count without being stored
    assert len(ext.locators) == 1 + 1000  # non-empty repeats are capped
    assert peak < 200 << 20
