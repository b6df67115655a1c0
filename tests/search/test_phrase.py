"""Exact words (search/phrase.py) and the adaptive mode: a pasted phrase finds its passage first, and the gate
keeps it, while questions rank exactly as dense."""

from __future__ import annotations

import shutil

import pytest

from citerag.app.home import Citerag
from citerag.app.models import AskOptions, SearchOptions
from citerag.search.phrase import MAX_MATCHES, contains_run, exact_matches
from citerag.settings import Settings
from citerag.text import collapse
from corpus_paths import DATA, DEV_CORPUS

PASTED = "digitized through a 16 bit A/D converter"  # page 3 of the two-column paper, verbatim


def test_a_run_must_be_contiguous_and_in_order() -> None:
    words = ["emg", "signals", "were", "digitized", "through", "a", "16", "bit", "a", "d", "converter"]
    assert contains_run(words, ["16", "bit", "a", "d"])
    assert not contains_run(words, ["bit", "16"])
    assert not contains_run(words, ["digitized", "a"])
    assert not contains_run(words, [])
    assert not contains_run(["a"], ["a", "b"])


def test_matches_follow_the_tokens_not_the_punctuation_or_case() -> None:
    contents = {1: "Sampled at 5000 Hz and digitized through a 16-bit A/D converter.", 2: "A 16 bit converter.",
                3: "Digitized through a 16 bit A/D converter (see [3])."}
    assert exact_matches(PASTED, [2, 3, 1], contents) == [3, 1]
    assert exact_matches("?!", [1, 2, 3], contents) == []


def test_a_phrase_in_too_many_chunks_decides_nothing() -> None:
    contents = {i: f"Paragraph {i}: install the package with apt install." for i in range(MAX_MATCHES + 1)}
    assert exact_matches("apt install", list(contents), contents) == []
    assert exact_matches("apt install", list(contents)[:MAX_MATCHES], contents) == list(contents)[:MAX_MATCHES]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """A folder of mixed real documents: the two-column paper (PDF), a manual (EPUB), an API manual (ODT) and
    two chapters of the Debian Reference (HTML)."""
    folder = tmp_path_factory.mktemp("mixed")
    for name in ("pdf-2col-paper-jner2016-ccby.pdf", "epub-live-manual-en.epub", "odt-odfpy-api-manual.odt"):
        shutil.copy(DATA / "samples" / name, folder / name)
    for name in ("ch05.en.html", "ch09.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    settings = Settings().with_changes(index_dir=folder / ".index")
    with Citerag.open(settings, create=True) as app:
        report = app.ingest([folder])
        assert not report.failed
    return settings


def test_dense_misses_pasted_words_that_adaptive_ranks_first_and_answers(mixed: Settings) -> None:
    with Citerag.open(mixed) as app:
        dense = app.search(PASTED, SearchOptions(mode="dense", k=5)).hits
        assert all(PASTED not in collapse(h.chunk.content) for h in dense)
        hits = app.search(PASTED, SearchOptions(k=5)).hits  # the default mode
        first = hits[0]
        assert PASTED in collapse(first.chunk.content) and first.exact
        assert first.document.name == "pdf-2col-paper-jner2016-ccby.pdf"
        assert first.cosine_distance > mixed.threshold  # the gate would have refused it on distance alone
        answer = app.ask(PASTED)
        assert not answer.refused
        assert (answer.citations[0].locator_label, answer.citations[0].fragment) == ("p. 3", "#page=3")
        assert PASTED in collapse(answer.citations[0].quote)
        # Dense alone answers from the wrong passages (table rows of another document), never from the paper.
        wrong = app.ask(PASTED, AskOptions(mode="dense"))
        assert all(PASTED not in collapse(c.quote) for c in wrong.citations)


def test_questions_rank_by_cosine_and_lexical_evidence_and_out_of_domain_ones_are_still_refused(
        mixed: Settings) -> None:
    questions = ("Which private address ranges will never conflict with addresses on the Internet?",
                 "How can a deleted file that a process still holds open be recovered?")
    with Citerag.open(mixed) as app:
        for question in questions:
            hits = app.search(question).hits
            assert not any(h.exact for h in hits)
            # An English question ranks with the index's own cosine plus 0.3 x its share of the lexical evidence.
            scores = [1.0 - h.cosine_distance + mixed.lexical_weight * h.lexical for h in hits]
            assert [h.score for h in hits] == pytest.approx(scores, abs=1e-6)
            assert scores == sorted(scores, reverse=True)
            assert any(h.lexical > 0 for h in hits)
        assert app.ask("How long should I boil an egg for a soft yolk?").refused
    with Citerag.open(mixed.with_changes(lexical_weight=0.0)) as app:  # no lexical weight: exactly dense
        for question in questions:
            dense = app.search(question, SearchOptions(mode="dense")).hits
            assert [h.chunk.id for h in app.search(question).hits] == [h.chunk.id for h in dense]
