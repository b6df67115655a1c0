"""The committed dev sets are what their verifiers and builders say: each German needle located verbatim in the
German edition, the cross-lingual sets rebuilt from their two sources without a difference."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from citerag.eval.devset import dev_set

EVAL = Path(__file__).resolve().parents[2] / "eval"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300)


def test_the_german_set_passes_its_verifier() -> None:
    done = run(EVAL / "debian-reference-de" / "check_needles.py")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("PASS: 40 truths / 80 queries")


def test_the_cross_lingual_sets_are_built_from_their_sources() -> None:
    done = run(EVAL / "make_cross_sets.py", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout


@pytest.mark.parametrize(("name", "corpus"), [("debian-reference-de-en", "debian-reference"),
                                              ("debian-reference-en-de", "debian-reference-de")])
def test_a_cross_lingual_set_asks_over_the_other_sets_corpus(name: str, corpus: str) -> None:
    found = dev_set(EVAL / name)
    assert found.corpus.resolve() == (EVAL / corpus / "corpus").resolve()
    assert found.questions.read_text(encoding="utf-8").count("\n") == 80
