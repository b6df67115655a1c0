"""Gold answers: an optional "answer" per question (SQuAD-style sets), and whether the answer shown holds it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citerag.errors import CiteragError
from citerag.eval.answers import gold_answer_share, holds_gold
from citerag.eval.truth import load_questions
from citerag.types import Answer, Citation, CitationCheck

ROW = {"id": "q1", "truth": "t1", "style": "doc", "query": "What is the Saxon Garden in Polish?",
       "needle": "Nearby, in Ogród Saski (the Saxon Garden), the Summer Theatre was in operation.",
       "source": "Warsaw.txt"}


def _write(tmp_path: Path, *rows: dict[str, object]) -> Path:
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_questions_carry_a_gold_answer_only_when_the_row_has_one(tmp_path: Path) -> None:
    with_answer = {**ROW, "answer": "Ogród Saski"}
    without = {**ROW, "id": "q2"}
    null = {**ROW, "id": "q3", "answer": None}
    qs = load_questions(_write(tmp_path, with_answer, without, null))
    assert [q.answer for q in qs] == ["Ogród Saski", None, None]
    assert qs[0].needle == ROW["needle"] and qs[0].source == "Warsaw.txt"


@pytest.mark.parametrize("bad", ["", "   ", 7, ["Ogród Saski"]])
def test_a_blank_or_non_string_gold_answer_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(CiteragError, match=r"question 'q1': \"answer\" must be a non-empty string"):
        load_questions(_write(tmp_path, {**ROW, "answer": bad}))


def test_the_xquad_sets_load_with_their_gold_answers() -> None:
    sets = sorted((Path(__file__).resolve().parents[2] / "eval").glob("xquad-*/questions.jsonl"))
    assert [p.parent.name for p in sets] == ["xquad-de", "xquad-de-en", "xquad-en"]  # the repository carries them
    for path in sets:
        qs = load_questions(path)
        assert qs and all(q.answer for q in qs), path


def _citation(index: int, quote: str) -> Citation:
    return Citation(index=index, document_id=1, document_name="Warsaw.txt", source_path="/c/Warsaw.txt",
                    locator_label="chars", fragment="#char=0,10", start=0, end=len(quote), quote=quote,
                    cosine_distance=0.3)


def _answer(text: str, quotes: list[str], cited: list[int], refused: bool = False) -> Answer:
    check = CitationCheck(n_sources=len(quotes), cited=cited, valid_markers=len(cited), invalid=[],
                          unused=[i for i in range(1, len(quotes) + 1) if i not in cited], sentences=1,
                          cited_sentences=1)
    return Answer(question="q", refused=refused, answer=text,
                  citations=[_citation(i, q) for i, q in enumerate(quotes, 1)],
                  check=None if refused else check)


def test_the_gold_answer_is_found_in_the_text_or_a_cited_quote_case_and_spacing_aside() -> None:
    quote = "Nearby, in Ogród\n  Saski (the Saxon Garden), the Summer Theatre was in operation."
    assert holds_gold(_answer("It is ogród saski [1].", ["unrelated"], [1]), "Ogród Saski")
    assert holds_gold(_answer("Nearby there was a theatre [1].", [quote], [1]), "OGRÓD SASKI")
    # Only quotes the answer validly cites are shown as its support.
    assert not holds_gold(_answer("Nearby there was a theatre [2].", [quote, "other"], [2]), "Ogród Saski")
    assert not holds_gold(_answer("The Summer Theatre [1].", [quote], [1]), "Łazienki Park")
    # A refusal shows nothing, whatever it retrieved.
    assert not holds_gold(_answer("I cannot answer from these documents.", [quote], [], refused=True), "Ogród Saski")


def test_the_gold_answer_share() -> None:
    share = gold_answer_share([True, False, True, True])
    assert share is not None and (share["count"], share["n"], share["value"]) == (3, 4, 0.75)
    assert 0 <= share["low"] < 0.75 < share["high"] <= 1
    assert gold_answer_share([]) is None  # a set without gold answers reports none
