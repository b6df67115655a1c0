"""What citerag itself writes into an answer, in the language of the question (citerag.lang.detect).

A small table per language, English where a language has none or a text is missing: two short messages do not
need an i18n framework. Quoted source sentences are never translated: they are the citation.
"""

from __future__ import annotations

from citerag.lang import DEFAULT, detect

# Every refusal starts with this literal marker, whatever the language: clients, the CLI's callers and the tests
# recognise a refusal by it. Only the explanation after it is localised.
NO_ANSWER = "NO ANSWER"

MESSAGES: dict[str, dict[str, str]] = {
    "en": {
        "refusal": 'nothing under cosine distance {threshold:g}{rule} for "{question}"',
        "calibrated": " (calibrated rule)",
        "no_sentence": "The sources found do not contain a sentence that answers this.",
    },
    "de": {
        "refusal": 'nichts unter Kosinus-Abstand {threshold:g}{rule} für "{question}"',
        "calibrated": " (kalibrierte Regel)",
        "no_sentence": "Die gefundenen Quellen enthalten keinen Satz, der dies beantwortet.",
    },
}


def message(key: str, language: str, **values: object) -> str:
    """The message `key` in `language` (English where that language lacks it), formatted with `values`."""
    template = MESSAGES.get(language, {}).get(key) or MESSAGES[DEFAULT][key]
    return template.format(**values)


def question_language(question: str) -> str:
    """The language to answer `question` in: its detected language (English when too short to tell)."""
    return detect(question)


def refusal_text(question: str, threshold: float, rule: str = "threshold", language: str | None = None) -> str:
    """'NO ANSWER: ' and, in the question's language, the cut and which rule set it when it was the collection's
    calibrated one."""
    language = language or question_language(question)
    which = message("calibrated", language) if rule == "calibrated" else ""
    return f"{NO_ANSWER}: " + message("refusal", language, threshold=threshold, rule=which, question=question)
