"""The shipped bank of general out-of-domain questions: the negatives of the calibration.

`ood_bank.jsonl` holds about 200 questions written for citerag (everyday life, other professions, other software),
phrased as people ask them. It is written independently of the evaluation's out-of-domain sets, which are never
used to fit a rule: they only measure it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

BANK_FILE = "ood_bank.jsonl"


@dataclass(frozen=True)
class BankQuestion:
    id: str
    topic: str  # everyday | profession | software
    query: str


def load_bank() -> list[BankQuestion]:
    """Every question of the shipped bank, in file order."""
    text = (resources.files("citerag.refusal") / BANK_FILE).read_text(encoding="utf-8")
    return [BankQuestion(**json.loads(line)) for line in text.splitlines() if line.strip()]
