"""One folder mixing every format and every hostile case, through the command line as a user runs it:
good files indexed with clickable locators, bad files failed with reasons, `status` shows both, `retry` retries."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from citerag.cli import main
from citerag.extract.ocr import TESSERACT_MISSING, tesseract_available
from citerag.store.sqlite import SqliteStore
from extract.hostile_files import hostile_files, sample_docx, sample_epub, sample_odt
from system_tools import needs_tesseract

SAMPLES = Path(__file__).resolve().parent / "data" / "samples"
SCANNED = "pdf-scanned-2col-linn.pdf"  # image only: indexed where tesseract is installed, else failed with the reason
REAL = ["pdf-table-mtcars-3p.pdf", SCANNED, "vtt-youtube-dl.vtt", "xlsx-readxl-deaths-messy.xlsx",
        "ods-pyexcel-formats.ods", "docx-python-docx-paras-tables.docx"]




def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    old = sys.argv
    sys.argv = ["citerag", *args]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, json.loads(out) if out.strip() else None


def _first_srt_cues(n: int) -> bytes:
    blocks = (SAMPLES / "srt-french-film-1332cues.srt").read_text(encoding="utf-8").split("\n\n")
    return ("\n\n".join(blocks[:n]) + "\n").encode()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    docs = tmp_path_factory.mktemp("mixed")
    for name in REAL:
        shutil.copy(SAMPLES / name, docs / name)
    (docs / "notes.docx").write_bytes(sample_docx())
    (docs / "tides.odt").write_bytes(sample_odt())
    (docs / "guide.epub").write_bytes(sample_epub())
    (docs / "film.srt").write_bytes(_first_srt_cues(30))
    (docs / "cities.csv").write_text("city,population,river\nLyon,522250,Rhône\nNantes,320732,Loire\n")
    (docs / "readme.md").write_text("# Readme\n\n## Setup\n\nRun the installer twice when the moon is full.\n")
    (docs / "page.html").write_text("<html><body><h1>Page</h1><p>Lighthouses blink every four seconds.</p></body>"
                                    "</html>")
    (docs / "old.txt").write_bytes("Café crème at the quay, served by René.\n".encode("cp1252"))
    (docs / "ignored.xyz").write_bytes(b"not a supported suffix: skipped in folders")
    bad = {name: reason for name, (data, reason) in hostile_files(SAMPLES).items()}
    for name, (data, _) in hostile_files(SAMPLES).items():
        (docs / f"bad-{name}").write_bytes(data)
    (docs / "bad-huge.txt").write_bytes(b"A perfectly good line of text.\n" * 12000)  # 0.35 MB > 0.25 MB limit
    bad["huge.txt"] = "over the 0.25 MB limit"
    expected = {f"bad-{k}": v for k, v in bad.items()}
    if not tesseract_available():
        expected[SCANNED] = TESSERACT_MISSING
    return docs, expected


@pytest.fixture(scope="module")
def ingested(folder: tuple[Path, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    docs, _ = folder
    ix = tmp_path_factory.mktemp("ix")
    (ix / "config.toml").write_text("max_file_mb = 0.25\n")
    out = io.StringIO()  # a module fixture cannot use capsys: read stdout by hand
    old = sys.argv
    sys.argv = ["citerag", "ingest", str(docs), "--index", str(ix), "--json"]
    try:
        with contextlib.redirect_stdout(out):
            main()
    finally:
        sys.argv = old
    return {"index": ix, "report": json.loads(out.getvalue())}


def test_good_files_indexed_bad_files_failed_with_reasons(folder: tuple[Path, dict[str, str]],
                                                            ingested: dict[str, Any]) -> None:
    docs, bad = folder
    report = ingested["report"]
    indexed = {Path(p).name for p in report["indexed"]}
    failed = {Path(f["source_path"]).name: f["error"] for f in report["failed"]}
    good = {p.name for p in docs.iterdir() if not p.name.startswith("bad-") and p.suffix != ".xyz"} - set(bad)
    assert indexed == good
    assert set(failed) == set(bad)
    for name, reason in bad.items():
        assert reason in failed[name] and "\n" not in failed[name], (name, failed[name])


def test_status_shows_both(ingested: dict[str, Any], folder: tuple[Path, dict[str, str]],
                           capsys: pytest.CaptureFixture[str]) -> None:
    docs, bad = folder
    code, status = _cli(["status", "--index", str(ingested["index"]), "--json"], capsys)
    assert code == 0
    assert status["counts"]["failed"] == len(bad) and status["counts"]["indexed"] == len(ingested["report"]["indexed"])
    by_name = {d["name"]: d for d in status["documents"]}
    assert by_name["bad-encrypted.pdf"]["error"].startswith("encrypted PDF")
    assert any("not valid UTF-8" in w for w in by_name["old.txt"]["warnings"])


def _search(ingested: dict[str, Any], query: str, capsys: pytest.CaptureFixture[str], k: int = 5) -> list[Any]:
    code, rows = _cli(["search", query, "--index", str(ingested["index"]), "--mode", "bm25", "--k", str(k),
                       "--json"], capsys)
    assert code == 0
    store = SqliteStore(ingested["index"])
    try:
        for row in rows:  # every quote is exactly where its offsets say
            assert store.canonical_text(row["document_id"])[row["start"]:row["end"]] == row["quote"]
    finally:
        store.close()
    return list(rows)


def test_citations_carry_page_time_and_cell_locators(ingested: dict[str, Any],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    top = _search(ingested, "Mazda RX4 Datsun 710 Hornet", capsys)[0]
    assert top["document_name"] == "pdf-table-mtcars-3p.pdf" and top["fragment"] == "#page=1"

    top = _search(ingested, "David Bowie musician", capsys)[0]
    assert top["document_name"] == "xlsx-readxl-deaths-messy.xlsx"
    assert re.fullmatch(r"#sheet=arts&range=A\d+:F\d+", top["fragment"]) and top["locator_label"].startswith("arts!A")

    top = _search(ingested, "this will happen is I'm telling", capsys)[0]
    assert top["document_name"] == "vtt-youtube-dl.vtt"
    assert top["fragment"] == "#t=286.07,305.069" and top["locator_label"] == "04:46–05:05"

    top = _search(ingested, "présentateur local régnait en maître", capsys)[0]
    assert top["document_name"] == "film.srt" and top["fragment"].startswith("#t=")

    top = _search(ingested, "cormorants breakwater", capsys)[0]
    assert top["document_name"] == "notes.docx" and top["locator_label"] == "Introduction"
    assert top["fragment"] == f"#char={top['start']},{top['end']}"

    top = _search(ingested, "Nantes Loire", capsys)[0]
    assert top["document_name"] == "cities.csv" and top["fragment"] == "#sheet=cities&range=A1:C3"


@needs_tesseract
def test_scanned_pdf_ocrd_indexed_and_cited_with_its_confidence(ingested: dict[str, Any],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, status = _cli(["status", "--index", str(ingested["index"]), "--json"], capsys)
    assert code == 0
    assert next(d for d in status["documents"] if d["name"] == SCANNED)["chunk_count"] > 0
    top = _search(ingested, "LinnSequencer MIDI sequence recorder", capsys)[0]
    assert top["document_name"] == SCANNED
    assert top["fragment"] == "#page=1" and top["locator_label"] == "p. 1" and 50 < top["ocr_confidence"] <= 100


def test_retry_indexes_what_was_fixed(ingested: dict[str, Any], folder: tuple[Path, dict[str, str]],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    docs, bad = folder
    (docs / "bad-truncated.docx").write_bytes((SAMPLES / "docx-python-docx-paras-tables.docx").read_bytes())
    code, report = _cli(["retry", "--index", str(ingested["index"]), "--json"], capsys)
    assert code == 0
    assert [Path(p).name for p in report["indexed"]] == ["bad-truncated.docx"]
    assert {Path(f["source_path"]).name for f in report["failed"]} == set(bad) - {"bad-truncated.docx"}
    code, status = _cli(["status", "--index", str(ingested["index"]), "--json"], capsys)
    assert status["counts"]["failed"] == len(bad) - 1
