"""Spreadsheets: sheets as sections, rows as paragraphs, header row repeated in embedded text only."""

from __future__ import annotations

from pathlib import Path

from formats_util import check_contract, extract, sample

from citerag.answer.citations import locate
from citerag.chunk import chunk_extracted

DEATHS_HEADER = "Name | Profession | Age | Has kids | Date of birth | Date of death"


def test_messy_xlsx_that_openpyxl_cannot_open() -> None:
    ext = sample("xlsx-readxl-deaths-messy.xlsx")
    chunks = check_contract(ext, "ACDE")
    assert [s.title for s in ext.sections] == ["arts", "other"]
    assert all(s.prefix == DEATHS_HEADER for s in ext.sections)  # notes above the table are not the header
    bowie = next(loc for loc in ext.locators if ext.text[loc.start:loc.end].startswith("David Bowie"))
    assert ext.text[bowie.start:bowie.end] == "David Bowie | musician | 69 | TRUE | 1947-01-08 | 2016-01-10"
    assert (bowie.sheet, bowie.row, bowie.col_first, bowie.col_last) == ("arts", 6, 1, 6)
    located = locate(ext.locators, bowie.start, bowie.end)
    assert located is not None and located.label == "arts!A6:F6" and located.fragment == "#sheet=arts&range=A6:F6"
    for strategy in "CE":
        for c in chunks[strategy]:
            # the header row is in every embedded text, exactly once, and never added to the content
            assert c.text.count(DEATHS_HEADER) == 1
    second = chunks["E"][1]
    assert DEATHS_HEADER not in second.content and DEATHS_HEADER in second.text
    assert second.text.startswith(f"[xlsx-readxl-deaths-messy > arts]\n{DEATHS_HEADER}\n")
    located = locate(ext.locators, second.start, second.end)
    assert located is not None and located.label == "arts!A10:F19"


def test_xlsx_chunk_ranges_match_their_rows() -> None:
    ext = sample("xlsx-readxl-datasets.xlsx")
    chunks = check_contract(ext)["E"]
    assert [s.title for s in ext.sections] == ["iris", "mtcars", "chickwts", "quakes"]
    first_row = next(loc for loc in ext.locators if loc.sheet == "iris" and loc.row == 2)
    assert ext.text[first_row.start:first_row.end] == "5.1 | 3.5 | 1.4 | 0.2 | setosa"
    for c in chunks:
        rows = [loc for loc in ext.locators if loc.start < c.end and loc.end > c.start]
        assert len({r.sheet for r in rows}) == 1  # a chunk never crosses sheets
        located = locate(ext.locators, c.start, c.end)
        assert located is not None
        sheet = rows[0].sheet
        last_col = "EKBE"[["iris", "mtcars", "chickwts", "quakes"].index(str(sheet))]
        cells = f"A{rows[0].row}:{last_col}{rows[-1].row}"
        assert located.label == f"{sheet}!{cells}" and located.fragment == f"#sheet={sheet}&range={cells}"
    assert sum(loc.sheet == "quakes" for loc in ext.locators) == 1001  # header + 1000 rows


def test_ods_sheet() -> None:
    ext = sample("ods-pyexcel-formats.ods")
    check_contract(ext)
    assert ext.sections[0].title == "Sheet1"
    assert ext.sections[0].prefix.startswith("Date | Time | Boolean | Float")
    located = locate(ext.locators, ext.sections[0].body_start, len(ext.text))
    assert located is not None and located.label == "Sheet1!A1:J6"


def test_csv_is_one_sheet_named_after_the_file(tmp_path: Path) -> None:
    data = "city;population;river\nLyon;522250;Rhône\nNantes;320732;Loire\n"
    ext = extract(tmp_path / "cities.csv", data.encode())
    assert ext.sections[-1].title == "cities" and ext.sections[-1].prefix == "city | population | river"
    nantes = ext.text.index("Nantes")
    located = locate(ext.locators, nantes, nantes + 6)
    assert located is not None and located.label == "cities!A3:C3"
    chunk = chunk_extracted(ext, "E")[0]
    assert chunk.text.count("city | population | river") == 1


def test_sheet_names_are_quoted_and_escaped_in_labels(tmp_path: Path) -> None:
    ext = extract(tmp_path / "my data.csv", b"a,b\n1,2\n")
    located = locate(ext.locators, ext.sections[-1].body_start, len(ext.text))
    assert located is not None
    assert located.label == "'my data'!A1:B2" and located.fragment == "#sheet=my%20data&range=A1:B2"
