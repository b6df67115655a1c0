"""CSV and TSV: one sheet named after the file; the delimiter is sniffed (, ; tab |), text decoded as
the other text formats are (UTF-8, else a recorded Windows-1252 fallback; binary refused).
See sheets.py for the text layout and locators.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from citerag.errors import ExtractionError
from citerag.extract.build import TextBuilder
from citerag.extract.decode import decode_text
from citerag.extract.sheets import MAX_ROWS, emit_sheet, limit_rows
from citerag.types import Extracted


class CsvExtractor:
    name = "csv"
    version = "1"
    suffixes: tuple[str, ...] = (".csv", ".tsv")

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        text, warnings = decode_text(data)
        if path.suffix.lower() == ".tsv":
            dialect: type[csv.Dialect] | csv.Dialect = csv.excel_tab
        else:
            try:
                dialect = csv.Sniffer().sniff(text[:65536], delimiters=",;\t|")
            except csv.Error:
                dialect = csv.excel
        csv.field_size_limit(10 * 1024 * 1024)
        name = path.stem
        try:
            rows = ((i + 1, list(enumerate(r, 1))) for i, r in enumerate(csv.reader(io.StringIO(text), dialect)))
            out = TextBuilder()
            emit_sheet(out, name, limit_rows(rows, MAX_ROWS, name))
        except csv.Error as exc:
            raise ExtractionError(f"not a readable CSV file: {exc}") from None
        return out.build(title or path.stem, self.name, self.version, warnings, what="CSV file")
