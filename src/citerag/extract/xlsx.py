"""XLSX (SpreadsheetML), read straight from its XML with zip + lxml rather than through openpyxl.

That survives what writers get wrong (the readxl sample lacks a drawing part openpyxl insists on),
keeps zip and entity bombs out (safe.py), and streams the sheet XML so memory stays bounded.
Shared strings, inline strings, booleans, errors and cached formula results are read; numbers in
a date or time format (built-in ids 14-22, 45-47, or a custom format with d/m/y/h/s) become ISO dates.
See sheets.py for the text layout and the locator map.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path

import lxml.etree

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder
from citerag.extract.safe import SafeZip, iterparse, local
from citerag.extract.sheets import MAX_COLS, MAX_ROWS, Row, emit_sheet, limit_rows, number
from citerag.types import Extracted

_CELL_REF = re.compile(r"([A-Z]+)(\d+)")
_DATE_FORMATS = set(range(14, 23)) | {45, 46, 47}
_DATE_CHARS = re.compile(r"[dmyhs]", re.I)


def _col_number(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n


def _rich_text(el: lxml.etree._Element) -> str:
    return "".join(t.text or "" for t in el.iter() if local(t.tag) == "t")


def _xlsx_dates(z: SafeZip, styles_path: str | None) -> set[int]:
    """Indices of cell styles (cellXfs) whose number format is a date or time."""
    if not styles_path or not z.has(styles_path):
        return set()
    root = z.xml(styles_path)
    custom = set()
    for el in root.iter():
        if local(el.tag) == "numFmt":
            code = re.sub(r'"[^"]*"|\[[^]]*\]|\\.', "", el.get("formatCode", ""))
            if _DATE_CHARS.search(code):
                custom.add(int(el.get("numFmtId", "0")))
    dates = set()
    for el in root.iter():
        if local(el.tag) == "cellXfs":
            for i, xf in enumerate(x for x in el if local(x.tag) == "xf"):
                fid = int(xf.get("numFmtId", "0"))
                if fid in _DATE_FORMATS or fid in custom:
                    dates.add(i)
    return dates


def _serial_date(v: str) -> str:
    try:
        f = float(v)
        when = dt.datetime(1899, 12, 30) + dt.timedelta(days=f)
    except (ValueError, OverflowError):
        return v
    if f.is_integer():
        return when.date().isoformat()
    return when.isoformat(sep=" ", timespec="seconds")


def _xlsx_rows(data: bytes, strings: list[str], dates: set[int], what: str) -> Iterator[Row]:
    next_row = 1
    for el in iterparse(data, what):
        if local(el.tag) != "row":
            continue
        number = int(el.get("r") or next_row)
        next_row = number + 1
        cells: list[tuple[int, str]] = []
        next_col = 1
        for c in el:
            if local(c.tag) != "c":
                continue
            m = _CELL_REF.match(c.get("r") or "")
            col = _col_number(m.group(1)) if m else next_col
            next_col = col + 1
            if col > MAX_COLS:
                continue
            cells.append((col, _cell_text(c, strings, dates)))
        el.clear()
        yield number, cells


def _cell_text(c: lxml.etree._Element, strings: list[str], dates: set[int]) -> str:
    kind = c.get("t", "n")
    value = next((x.text or "" for x in c if local(x.tag) == "v"), "")
    if kind == "s":
        try:
            return strings[int(value)]
        except (ValueError, IndexError):
            return ""
    if kind == "inlineStr":
        return "".join(_rich_text(x) for x in c if local(x.tag) == "is")
    if kind == "b":
        return "TRUE" if value == "1" else "FALSE" if value else ""
    if kind in ("str", "e"):
        return value
    if value and int(c.get("s", "0") or 0) in dates:
        return _serial_date(value)
    return number(value) if value else ""


def _shared_strings(data: bytes, path: str) -> list[str]:
    strings = []
    for el in iterparse(data, f"XLSX part {path}"):
        if local(el.tag) == "si":
            strings.append(_rich_text(el))
            el.clear()
    return strings


def _resolve(base: str, target: str) -> str:
    return target.lstrip("/") if target.startswith("/") else posixpath.normpath(posixpath.join(base, target))


class XlsxExtractor:
    name = "xlsx"
    version = "1"
    suffixes: tuple[str, ...] = (".xlsx", ".xlsm")

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        z = SafeZip(data, "XLSX")
        if not z.has("xl/workbook.xml"):
            raise ExtractionError("not a valid XLSX file: xl/workbook.xml is missing")
        workbook = z.xml("xl/workbook.xml")
        rels: dict[str, tuple[str, str]] = {}
        if z.has("xl/_rels/workbook.xml.rels"):
            for rel in z.xml("xl/_rels/workbook.xml.rels"):
                kind = rel.get("Type", "").rsplit("/", 1)[-1]
                rels[rel.get("Id", "")] = (kind, _resolve("xl", rel.get("Target", "")))
        strings_path = next((t for kind, t in rels.values() if kind == "sharedStrings"), "xl/sharedStrings.xml")
        styles_path = next((t for kind, t in rels.values() if kind == "styles"), "xl/styles.xml")
        strings = _shared_strings(z.read(strings_path), strings_path) if z.has(strings_path) else []
        dates = _xlsx_dates(z, styles_path)
        out = TextBuilder()
        total = 0
        warnings: list[str] = []
        for sheet in (el for el in workbook.iter() if local(el.tag) == "sheet"):
            name = sheet.get("name") or f"Sheet{sheet.get('sheetId', '')}"
            rid = next((v for k, v in sheet.attrib.items() if local(k) == "id"), "")
            kind, target = rels.get(str(rid), ("", ""))
            if not target or not z.has(target):
                if kind in ("", "worksheet"):
                    warnings.append(f"sheet {name}: its part {target or '(none)'} is missing; skipped")
                continue
            rows = _xlsx_rows(z.read(target), strings, dates, f"XLSX part {target}")
            total += emit_sheet(out, name, limit_rows(rows, MAX_ROWS - total, name))
        return out.build(title or path.stem, self.name, self.version, warnings, what="workbook (all sheets empty)")
