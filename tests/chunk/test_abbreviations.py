"""German abbreviations do not end a sentence when the text is German; every other language, and no language,
cut exactly as the reference does (the conformance tests hold that part on the reference's inputs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from citerag.abbreviations import continues
from citerag.answer.check import split_sentences
from citerag.app.files import extract_file
from citerag.chunk import chunk_extracted
from citerag.chunk.boundaries import boundary_ranges, sentence_ranges
from citerag.types import Extracted

CORPUS = Path(__file__).resolve().parents[2] / "eval" / "debian-reference-de" / "corpus"


@pytest.fixture(scope="module")
def german() -> Extracted:
    return extract_file(CORPUS / "ch01.de.html")


def _sentences(text: str, language: str | None) -> list[str]:
    return [text[a:b] for p in sentence_ranges(text, 0, len(text), language) for a, b in p]


def test_real_sentences_with_z_b_stay_whole(german: Extracted) -> None:
    text = german.text
    sentence = "so dass andere Programme (z. B. reportbug(1)) ihn aufrufen können."
    assert sentence in text
    de = _sentences(text, "de")
    assert any(sentence in s for s in de)
    assert not any(sentence in s for s in _sentences(text, None))  # the reference cuts after "z." and "B."
    cut = [s for s in de if re.search(r"(?:\bz\. B|\bd\. h|\bbzw|\bca|\bvgl|\bggf)\.$", s)]
    assert cut == []
    assert not any(s in ("z.", "B.") for s in de)
    # Sentence ends stay: "usw." before an upper-case word, and ordinary stops.
    assert "der Zeitpunkt des letzten Zugriffs usw." in " ".join(de)
    assert len(de) > 500


def test_other_languages_cut_as_the_reference(german: Extracted) -> None:
    text = german.text
    assert _sentences(text, "en") == _sentences(text, None)
    assert list(boundary_ranges(text, 0, len(text), 120, "fr")) == list(boundary_ranges(text, 0, len(text), 120))


def test_chunks_of_a_german_document_do_not_end_after_an_abbreviation(german: Extracted) -> None:
    small = [c.content for c in chunk_extracted(german, "C", 120, language="de")]
    assert not [c for c in small if re.search(r"(?:\bz\.|\bz\. B\.|\bd\. h\.|\bbzw\.)$", c)]
    reference = [c.content for c in chunk_extracted(german, "C", 120)]
    assert [c for c in reference if re.search(r"\bz\. B\.$|\bz\.$", c)]  # what the language changes


@pytest.mark.parametrize(("before", "after", "expected"), [
    ("Programme (z.", " B. reportbug", True),
    ("Programme (z. B.", " reportbug", True),
    ("d. h.", " Sie", True),
    ("Debian bzw.", " Ubuntu", True),
    ("Das ist die Regel.", " Sie", False),
    ("Zugriffs usw.", " Emacs", False),
    ("Zugriffs usw.", " und so", True),
    ("Version 2.", "6 ist", True),
    ("Siehe Anhang A.", " Dort", False),
    ("Programme (z.", " B. reportbug", True),
])
def test_continues(before: str, after: str, expected: bool) -> None:
    assert continues(before, after, "de") is expected
    assert continues(before, after, "en") is False


def test_citation_check_sentences_in_german() -> None:
    answer = "Manche Programme (z. B. reportbug) rufen ihn auf [1]. Das gilt bzw. galt für Debian usw. Ende [2]."
    assert split_sentences(answer, "de") == ["Manche Programme (z. B. reportbug) rufen ihn auf [1].",
                                             "Das gilt bzw. galt für Debian usw.", "Ende [2]."]
    assert len(split_sentences(answer)) == 6
