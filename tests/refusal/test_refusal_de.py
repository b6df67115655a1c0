"""A German collection (three chapters of debian-reference-de, the real default encoder): its refusal rule is
fitted on the German bank with German question stems, German questions are refused and answered in German, and a
German and English collection is fitted on both banks.

The out-of-domain questions below were written for this test: they are in neither bank.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.answer.messages import NO_ANSWER
from citerag.app.home import Citerag
from citerag.lang import detect
from citerag.refusal.bank import load_bank
from citerag.refusal.calibrate import MIN_SYNTHETIC
from citerag.refusal.synthetic import PHRASINGS, synthetic_questions
from citerag.settings import Settings
from corpus_paths import DEV_CORPUS, ROOT

DE_SET = ROOT / "eval" / "debian-reference-de"
DE_CORPUS = DE_SET / "corpus"
CHAPTERS = ("pr01.de.html", "ch03.de.html", "ch08.de.html")
FAR = ("Wie lange muss ein Rinderbraten bei 160 Grad im Ofen garen?",
       "Welche Unterlagen brauche ich für die Anmeldung meines Kindes in der Kita?",
       "Darf mein Nachbar seine Hecke höher als zwei Meter wachsen lassen?",
       "Wann blühen in Japan die Kirschbäume am schönsten?",
       "Wie viel Trinkgeld gibt man in Österreich im Restaurant?")
_UMLAUT_WORD = re.compile(r"\w*[äöüßÄÖÜ]\w*")


def _far_questions() -> list[str]:
    """The questions above, and the German dev set's far out-of-domain ones once it has them."""
    path = DE_SET / "ood.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()] if path.exists() else []
    return [*FAR, *(r["query"] for r in rows if r.get("kind") == "far")]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs-de")
    for name in CHAPTERS:
        shutil.copy(DE_CORPUS / name, folder / name)
    index = tmp_path_factory.mktemp("index-de")
    with Citerag.open(Settings(index_dir=index), create=True) as app:
        assert len(app.ingest([folder]).indexed) == len(CHAPTERS)
    return index


@pytest.fixture()
def app(index: Path) -> Iterator[Citerag]:
    with Citerag.open(Settings(index_dir=index)) as opened:
        yield opened


def test_a_german_collection_is_calibrated_on_the_german_bank(app: Citerag) -> None:
    rule = app.collection().refusal_rule()
    assert rule is not None and rule.languages == ["de"] and rule.language_shares["de"] >= 0.8
    assert rule.bank == len(load_bank("de")) and rule.synthetic >= MIN_SYNTHETIC
    assert 0 <= rule.synthetic_refused < rule.synthetic / 2 and 0 <= rule.bank_answered < rule.bank / 10
    assert ", de): refuses " in rule.describe()


def test_german_out_of_domain_questions_are_refused_in_german(app: Citerag) -> None:
    cut = app.collection().refusal_rule().threshold  # type: ignore[union-attr]
    for question in _far_questions():
        answer = app.ask(question)
        assert answer.refused, question
        # The marker stays English (clients parse it); the explanation follows the question's language.
        assert answer.answer == \
            f'{NO_ANSWER}: nichts unter Kosinus-Abstand {cut:g} (kalibrierte Regel) für "{question}"'
    english = "How long should I roast beef at 160 degrees in the oven?"
    assert app.ask(english).answer.startswith(f"{NO_ANSWER}: nothing under cosine distance {cut:g} (calibrated rule)")


def test_a_german_question_gets_german_quotes_from_the_german_chapters(app: Citerag) -> None:
    answer = app.ask("Wie wird die Popcon-Zahl eines Pakets berechnet?")
    assert not answer.refused and answer.citations
    quoted = re.sub(r"\s*\[\d+\]", "", answer.answer)
    assert detect(quoted) == "de"
    sources = " ".join(" ".join(c.quote.split()) for c in answer.citations)
    assert all(part.strip() in sources for part in re.split(r"\s*\[\d+\]\s*", answer.answer) if part.strip())


def test_german_synthetic_questions_keep_whole_words_and_german_stems(app: Citerag) -> None:
    chunks, _ = app.collection().indexed_chunks()
    questions = synthetic_questions(chunks, 60, seed=5)  # each chunk's detected language
    german = [q for q in questions if q.language == "de"]
    assert len(german) >= 50
    stems = PHRASINGS["de"].stems + PHRASINGS["de"].heading_stems
    prefixes = {s.split("{}")[0] for s in stems if s.split("{}")[0]}
    assert sum(any(q.query.startswith(p) for p in prefixes) for q in german) >= len(german) // 2
    # Words with umlauts come whole and as written ("Größe", not "Gr" and "e"), nouns keep their capital.
    text = " ".join(c.content for c in chunks)
    umlaut_words = [w for q in german for w in _UMLAUT_WORD.findall(q.query)]
    assert len(umlaut_words) >= 5 and all(w in text for w in umlaut_words)


def test_a_german_and_english_collection_is_fitted_on_both_banks(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    shutil.copy(DE_CORPUS / "ch08.de.html", folder / "ch08.de.html")
    shutil.copy(DEV_CORPUS / "ch08.en.html", folder / "ch08.en.html")
    with Citerag.open(Settings(index_dir=tmp_path / "index"), create=True) as app:
        app.ingest([folder])
        rule = app.collection().refusal_rule()
        assert rule is not None and sorted(rule.languages) == ["de", "en"]
        assert rule.bank == len(load_bank("de")) + len(load_bank("en"))
        assert all(rule.language_shares[code] >= 0.2 for code in ("de", "en"))
        chunks, _ = app.collection().indexed_chunks()
        assert {q.language for q in synthetic_questions(chunks, 40)} == {"de", "en"}
