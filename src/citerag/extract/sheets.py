"""Spreadsheets (XLSX, ODS, CSV) share one model: each sheet a section, each non-empty row a paragraph.

A row is written "a | b | c" (empty cells kept between filled ones, so columns line up with the
header). The header row (the first of a sheet's opening rows that is wide, mostly words, and
followed by another wide row, so notes above a table are skipped) becomes the section's `prefix`:
the chunker repeats it in each chunk's embedded text, never in the quoted content. Rows are
separated by a blank line, so the boundary chunker cuts runs of whole rows.

The locator map holds one span per row: canonical [start, end) -> sheet, row number and the
row's first and last non-empty column (1-based), which the citation turns into "Sheet1!A12:F30".
The readers are xlsx.py, ods.py and csvfile.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder

MAX_ROWS = 200_000  # per workbook
MAX_COLS = 16_384
MAX_REPEAT = 1_000  # ODS repeated non-empty rows/cells materialised at most this often
_HEADER_SCAN = 20

Row = tuple[int, list[tuple[int, str]]]  # (1-based row number, [(1-based column, text)])


def number(v: str) -> str:
    try:
        f = float(v)
    except ValueError:
        return v
    if f.is_integer() and abs(f) < 1e15:
        return str(int(f))
    return f"{f:.15g}"


def _is_number(s: str) -> bool:
    try:
        float(s.replace(",", ""))
    except ValueError:
        return False
    return True


def _header_index(rows: list[Row]) -> int | None:
    """The first of the opening rows that is wide, mostly words, and followed by a wide row."""
    head = rows[:_HEADER_SCAN]
    if not head:
        return None
    widest = max(len(cells) for _, cells in head)
    if widest < 2:
        return None
    wide = max(2, 0.6 * widest)
    for i, (_, cells) in enumerate(head):
        words = sum(not _is_number(t) for _, t in cells)
        following = rows[i + 1][1] if i + 1 < len(rows) else None
        if len(cells) >= wide and words * 2 >= len(cells) and (following is None or len(following) >= wide):
            return i
    return None


def _row_text(cells: list[tuple[int, str]]) -> str:
    first = cells[0][0]
    values = [""] * (cells[-1][0] - first + 1)
    for col, text in cells:
        values[col - first] = text
    return " | ".join(values)


def emit_sheet(out: TextBuilder, name: str, rows: Iterable[Row]) -> int:
    """Append one sheet (heading, rows with locators); returns the number of rows written."""
    kept: list[Row] = []
    for number, cells in rows:
        cells = sorted((c, " ".join(t.split())) for c, t in cells if t and t.strip())
        if cells:
            kept.append((number, cells))
    if not kept:
        return 0
    header = _header_index(kept)
    out.heading(name, prefix=_row_text(kept[header][1]) if header is not None else "")
    for number, cells in kept:
        out.block(_row_text(cells), sheet=name, row=number, col_first=cells[0][0], col_last=cells[-1][0])
    return len(kept)


def limit_rows(rows: Iterable[Row], budget: int, name: str) -> Iterator[Row]:
    for i, row in enumerate(rows):
        if i >= budget:
            raise ExtractionError(f"more than {MAX_ROWS} rows (sheet {name}): over the limit, refused")
        yield row
