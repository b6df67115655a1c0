"""Markdown, text and HTML extraction on real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from citerag.errors import ExtractionError
from citerag.extract import extractor_for
from citerag.extract.decode import decode_text
from citerag.extract.html import HtmlExtractor
from citerag.extract.markdown import MarkdownExtractor, TextExtractor
from corpus_paths import DATA, DEV_CORPUS


def _html(name: str) -> tuple[str, list[str], str]:
    path = DEV_CORPUS / name
    ext = HtmlExtractor().extract(path.read_bytes(), path)
    return ext.text, [s.title for s in ext.sections], ext.title


def test_html_body_text_sections_and_title() -> None:
    text, sections, title = _html("ch03.en.html")
    # DocBook puts non-breaking spaces after numbers; they are kept as the page has them.
    sections = [s.replace("\xa0", " ") for s in sections]
    assert title.replace("\xa0", " ") == "Chapter 3. The system initialization"
    assert sections[0] == "Chapter 3. The system initialization"  # h1
    assert "3.1. An overview of the boot strap process" in sections  # h2
    assert "3.1.2. Stage 2: the boot loader" in sections  # h3
    # Dev-set needles survive verbatim (they sit in <p>, whitespace collapsed).
    assert 'Red "●" indicates a "failed" or "error" state.' in text
    # Navigation header/footer and the table of contents are gone.
    assert "Table of Contents" not in text
    assert "Prev" not in text.split("\n")[:5]
    assert text.count("Chapter\xa03.\xa0The system initialization") == 1


def test_html_tables_and_pre_kept_as_text() -> None:
    text, _, _ = _html("ch03.en.html")
    # A table row becomes one line of cells; <pre> keeps its line breaks.
    assert 'List all target unit configuration | "systemctl list-units --type=target"' in text.split("\n")
    assert "menuentry 'Debian GNU/Linux' ... {\n" in text


def test_html_sections_partition_the_text() -> None:
    path = DEV_CORPUS / "ch09.en.html"
    ext = HtmlExtractor().extract(path.read_bytes(), path)
    assert ext.sections[0].start == 0 and ext.sections[-1].end == len(ext.text)
    for a, b in zip(ext.sections, ext.sections[1:], strict=False):
        assert a.end == b.start
        assert ext.text[b.start:b.body_start] == b.title


def test_markdown_sections_follow_level_two_headings() -> None:
    path = DATA / "markdown" / "edge" / "edge-cases.md"
    ext = MarkdownExtractor().extract(path.read_bytes(), path)
    assert [s.title for s in ext.sections] == ["", "Heading with spaces around",
                                               "Non-breaking\u00a0space and BOM\ufeff inside", "Empty section",
                                               "Heading as the very last line"]
    assert ext.title == "A first-level title is not a section"
    last = ext.sections[-1]
    assert last.body_start == last.start  # no newline after it: the reference keeps the line as body


def test_text_files_use_the_file_name_as_title(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"Line one.\r\nLine two.\r\n")
    ext = TextExtractor().extract(path.read_bytes(), path)
    assert ext.title == "notes" and ext.text == "Line one.\nLine two.\n"


def test_decode_rules() -> None:
    assert decode_text("café".encode("utf-8-sig")) == ("café", [])
    text, warnings = decode_text("café ünïcode".encode("cp1252"))
    assert text == "café ünïcode" and "not valid UTF-8" in warnings[0]
    with pytest.raises(ExtractionError, match="binary data"):
        decode_text(b"PK\x03\x04\x00\x00binary")
    with pytest.raises(ExtractionError, match="empty file"):
        decode_text(b"  \n\n ")


def test_hostile_html(tmp_path: Path) -> None:
    def nested(depth: int) -> bytes:
        return b"<html><body>" + b"<div>" * depth + b"deep words" + b"</div>" * depth + b"<p>after</p></body></html>"

    assert "deep words\n\nafter" in HtmlExtractor().extract(nested(1500), tmp_path / "deep.html").text
    with pytest.raises(ExtractionError, match="nested too deeply"):
        HtmlExtractor().extract(nested(5000), tmp_path / "deeper.html")
    with pytest.raises(ExtractionError, match="no readable text"):
        HtmlExtractor().extract(b"<html><body><script>x()</script><nav>menu</nav></body></html>",
                                tmp_path / "empty.html")


def test_registry_by_suffix() -> None:
    assert extractor_for(Path("a.MD")).name == "markdown"  # type: ignore[union-attr]
    assert extractor_for(Path("a.htm")).name == "html"  # type: ignore[union-attr]
    assert extractor_for(Path("a.exe")) is None
