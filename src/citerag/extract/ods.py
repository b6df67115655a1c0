"""ODS (OpenDocument spreadsheet): content.xml read with zip + lxml (safe.py).

Repeated rows and cells (number-rows-repeated, number-columns-repeated) are expanded only when they
hold something, and at most MAX_REPEAT times; empty repeats just advance the row count, so a sheet
declaring a million empty rows costs nothing. See sheets.py for the text layout and locators.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lxml.etree

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder
from citerag.extract.odt import odf_text
from citerag.extract.safe import SafeZip, local
from citerag.extract.sheets import MAX_COLS, MAX_REPEAT, MAX_ROWS, Row, emit_sheet, limit_rows, number
from citerag.types import Extracted

_TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


def _ods_cell(cell: lxml.etree._Element) -> str:
    kind = cell.get(f"{{{_OFFICE}}}value-type")
    text = "\n".join(odf_text(p) for p in cell if local(p.tag) in ("p", "h")).strip()
    if text:
        return text
    if kind in ("float", "percentage", "currency"):
        return number(cell.get(f"{{{_OFFICE}}}value", ""))
    if kind == "date":
        return cell.get(f"{{{_OFFICE}}}date-value", "")
    if kind == "boolean":
        return (cell.get(f"{{{_OFFICE}}}boolean-value") or "").upper()
    return ""


def _ods_rows(table: lxml.etree._Element) -> Iterator[Row]:
    number = 1
    for row in table.iter(f"{{{_TABLE}}}table-row"):
        repeat = int(row.get(f"{{{_TABLE}}}number-rows-repeated", "1") or 1)
        cells: list[tuple[int, str]] = []
        col = 1
        for cell in row:
            if local(cell.tag) not in ("table-cell", "covered-table-cell"):
                continue
            span = int(cell.get(f"{{{_TABLE}}}number-columns-repeated", "1") or 1)
            text = _ods_cell(cell)
            if text:
                for k in range(min(span, MAX_REPEAT)):
                    if col + k <= MAX_COLS:
                        cells.append((col + k, text))
            col += span
        if cells:
            for k in range(min(repeat, MAX_REPEAT)):
                yield number + k, cells
        number += repeat


class OdsExtractor:
    name = "ods"
    version = "1"
    suffixes: tuple[str, ...] = (".ods",)

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        z = SafeZip(data, "ODS")
        if not z.has("content.xml"):
            raise ExtractionError("not a valid ODS file: content.xml is missing")
        root = z.xml("content.xml")
        out = TextBuilder()
        total = 0
        for table in root.iter(f"{{{_TABLE}}}table"):
            name = table.get(f"{{{_TABLE}}}name") or f"Sheet{total + 1}"
            total += emit_sheet(out, name, limit_rows(_ods_rows(table), MAX_ROWS - total, name))
        return out.build(title or path.stem, self.name, self.version, what="spreadsheet (all sheets empty)")
