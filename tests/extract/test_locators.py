"""The locator map: resolved into citations, stored with the document, and invisible to chunking."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from citerag.answer.citations import cite, column_letters, locate
from citerag.chunk import chunk_extracted
from citerag.store import ChunkStats
from citerag.store.sqlite import SqliteStore
from citerag.types import Chunk, Document, Extracted, Hit, Locator, Section, StoredChunk

PAGES = [Locator(0, 100, page=11), Locator(102, 200, page=12, ocr_confidence=71.5),
         Locator(201, 300, page=13, ocr_confidence=88.0)]


def test_pdf_pages() -> None:
    one = locate(PAGES, 10, 90)
    assert one is not None and (one.label, one.fragment, one.ocr_confidence) == ("p. 11", "#page=11", None)
    two = locate(PAGES, 150, 250)
    assert two is not None and (two.label, two.fragment, two.ocr_confidence) == ("p. 12–13", "#page=12", 71.5)
    gap = locate(PAGES, 100, 102)  # only a separator: the page before it
    assert gap is not None and gap.fragment == "#page=11"


def test_times_and_cells() -> None:
    cues = [Locator(0, 10, t_start=132.4, t_end=140.0), Locator(12, 20, t_start=3725.0, t_end=3730.25)]
    got = locate(cues, 0, 20)
    assert got is not None and got.fragment == "#t=132.4,3730.25" and got.label == "02:12–1:02:10"
    rows = [Locator(0, 5, sheet="Sheet1", row=12, col_first=1, col_last=6),
            Locator(7, 9, sheet="Sheet1", row=30, col_first=2, col_last=4)]
    got = locate(rows, 0, 9)
    assert got is not None and got.label == "Sheet1!A12:F30" and got.fragment == "#sheet=Sheet1&range=A12:F30"
    assert [column_letters(n) for n in (1, 26, 27, 52, 703)] == ["A", "Z", "AA", "AZ", "AAA"]
    assert locate([], 0, 5) is None


def _doc(locators: list[Locator]) -> Document:
    return Document(1, "/d/x.pdf", "x.pdf", "X", "s", "indexed", None, [], 1, {}, "now", locators)


def test_cite_uses_the_document_map_and_keeps_text_fragments_for_plain_text() -> None:
    text = "a" * 300
    chunk = StoredChunk(1, 1, 0, "t", text[150:250], "Intro", 150, 250)
    [c] = cite([Hit(chunk, _doc(PAGES), 1, 0.9, 0.1)], lambda _: text)
    assert (c.locator_label, c.fragment, c.ocr_confidence) == ("p. 12–13", "#page=12", 71.5)
    assert c.as_json()["ocr_confidence"] == 71.5 and c.quote == text[150:250]
    [plain] = cite([Hit(chunk, _doc([]), 1, 0.9, 0.1)], lambda _: text)
    assert (plain.locator_label, plain.fragment) == ("Intro", "#char=150,250")
    assert "ocr_confidence" not in plain.as_json()


def test_store_keeps_the_map_with_the_document(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    doc = store.add_pending("/d/x.pdf", "x.pdf", "s")
    vec = np.ones((1, 4), dtype=np.float32) / 2
    store.save_indexed(doc, title="X", sha256="s", stamps={"embedding_model": "m"}, canonical_text="a" * 300,
                       warnings=[], chunks=[Chunk("t", "a" * 10, "", 0, 10)], vectors=vec,
                       stats=ChunkStats([3], [0]), locators=PAGES)
    assert store.locators(doc) == PAGES
    assert store.document(doc).locators == PAGES  # type: ignore[union-attr]
    assert store.snapshot("m").documents[doc].locators == PAGES
    store.save_failed(doc, sha256="s", stamps={}, error="boom")
    assert store.locators(doc) == []
    store.close()


def test_section_prefix_goes_into_text_only() -> None:
    text = "Sheet\n\nh1 | h2\n\n1 | 2\n\n3 | 4"
    ext = Extracted(text, "Book", [Section("Sheet", 0, 5, len(text), prefix="h1 | h2")], "t", "1")
    for strategy in "ABCDEF":
        for c in chunk_extracted(ext, strategy, target=16, overlap=4):
            assert text[c.start:c.end] == c.content
            assert c.text.count("h1 | h2") == 1  # once: from the prefix, or from the content that holds it
    e = chunk_extracted(ext, "E", target=16)
    assert [c.text for c in e] == ["[Book > Sheet]\nh1 | h2\n\n1 | 2", "[Book > Sheet]\nh1 | h2\n3 | 4"]
