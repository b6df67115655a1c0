"""The texts citerag writes itself follow the question's language; the NO ANSWER marker never changes."""

from __future__ import annotations

from citerag.answer.messages import NO_ANSWER, message, refusal_text
from citerag.answer.pipeline import refusal


def test_a_german_question_is_refused_in_german_behind_the_english_marker() -> None:
    question = "Wie richte ich einen Drucker im Netzwerk ein?"
    assert refusal(question, 0.56, "calibrated") == \
        f'{NO_ANSWER}: nichts unter Kosinus-Abstand 0.56 (kalibrierte Regel) für "{question}"'
    assert refusal(question, 0.675) == f'{NO_ANSWER}: nichts unter Kosinus-Abstand 0.675 für "{question}"'


def test_english_and_languages_without_messages_get_english() -> None:
    question = "How do I set up a network printer?"
    assert refusal(question, 0.56, "calibrated") == \
        f'NO ANSWER: nothing under cosine distance 0.56 (calibrated rule) for "{question}"'
    french = "Comment configurer une imprimante réseau dans le bureau ?"
    assert refusal_text(french, 0.5).startswith('NO ANSWER: nothing under cosine distance 0.5 for "Comment')
    assert message("no_sentence", "fr") == message("no_sentence", "en") != message("no_sentence", "de")


def test_the_extractive_answer_without_a_sentence_says_so_in_the_questions_language() -> None:
    from citerag.answer.generators.extractive import ExtractiveGenerator
    from citerag.types import Citation

    table = Citation(1, 1, "ch01.de.html", "ch01.de.html", "1.2", "", 0, 9, "Siehe ls(1).", 0.3)
    generator = ExtractiveGenerator(encoder=None)  # type: ignore[arg-type]  # not reached without a sentence
    german = generator.generate("Wie zähle ich die Dateien in einem Verzeichnis?", [table], "")
    assert german == "Die gefundenen Quellen enthalten keinen Satz, der dies beantwortet. [1]"
    english = generator.generate("How do I count the files in a directory?", [table], "")
    assert english == "The sources found do not contain a sentence that answers this. [1]"
