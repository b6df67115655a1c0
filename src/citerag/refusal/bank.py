"""The shipped banks of general out-of-domain questions: the negatives of the calibration, one per language.

`ood_bank.jsonl` (English, 219 questions) and `ood_bank.<code>.jsonl` for each other language (German:
`ood_bank.de.jsonl`, 215) hold questions written for citerag (everyday life, other professions, science and
sport, other software and clouds, some near-domain IT that a Linux manual does not cover), phrased as people ask
them. They are written independently of the evaluation's out-of-domain sets, which are never used to fit a rule:
they only measure it (a test checks that no bank question is one of theirs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from citerag.lang import DEFAULT

BANK_FILE = "ood_bank.jsonl"  # the English bank keeps its original name
BANK_LANGUAGES = ("en", "de")  # the languages a bank ships for; others fall back to English


@dataclass(frozen=True)
class BankQuestion:
    id: str
    topic: str  # everyday | profession | science | software
    query: str


def bank_file(language: str) -> str:
    return BANK_FILE if language == DEFAULT else f"ood_bank.{language}.jsonl"


def bank_language(language: str) -> str:
    """The language whose bank serves `language`: itself where a bank ships, else English."""
    return language if language in BANK_LANGUAGES else DEFAULT


def load_bank(language: str = DEFAULT) -> list[BankQuestion]:
    """Every question of the bank for `language` (English where none ships), in file order."""
    name = bank_file(bank_language(language))
    text = (resources.files("citerag.refusal") / name).read_text(encoding="utf-8")
    return [BankQuestion(**json.loads(line)) for line in text.splitlines() if line.strip()]
