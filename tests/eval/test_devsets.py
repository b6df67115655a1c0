"""The committed dev sets are what their verifiers and builders say: each German needle located verbatim in the
German edition, the cross-lingual sets rebuilt from their two sources without a difference, the XQuAD sets loadable
with each needle in its own article alone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from citerag.eval.conversations import load_conversations
from citerag.eval.devset import dev_set
from citerag.eval.truth import load_ood, load_questions

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


XQUAD = ("xquad-en", "xquad-de", "xquad-de-en")


def _collapsed(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("name", XQUAD)
def test_an_xquad_set_loads_and_each_needle_is_in_its_source_alone(name: str) -> None:
    """XQuAD sets (Wikipedia paragraphs, CC BY-SA): every needle occurs in its source file once whitespace is
    collapsed and in no other file; questions and out-of-domain questions parse with the loaders."""
    found = dev_set(EVAL / name)
    texts = {p.name: _collapsed(p.read_text(encoding="utf-8")) for p in sorted(found.corpus.glob("*.txt"))}
    assert len(texts) == 19 and (EVAL / name / "LICENSE-CC-BY-SA-4.0.txt").is_file()
    questions = load_questions(found.questions)
    assert len(questions) == 430 and {q.source for q in questions} <= set(texts)
    for q in questions:
        needle = _collapsed(q.needle)
        assert [f for f, text in texts.items() if needle in text] == [q.source], q.id
    assert found.ood is not None
    ood = load_ood(found.ood)
    assert len(ood) == 30 and {o.kind for o in ood} == {"near", "far"}
    assert sum(o.kind == "far" for o in ood) >= 8 and sum(o.trap for o in ood) >= 5
    assert all(o.kind == "near" for o in ood if o.trap)


def test_the_xquad_cross_lingual_set_asks_the_german_questions_over_the_english_articles() -> None:
    found = dev_set(EVAL / "xquad-de-en")
    assert found.corpus.resolve() == (EVAL / "xquad-en" / "corpus").resolve()
    german = dev_set(EVAL / "xquad-de")
    assert [q.query for q in load_questions(found.questions)] == [q.query for q in load_questions(german.questions)]
    assert found.ood is not None and german.ood is not None
    mine, theirs = load_ood(found.ood), load_ood(german.ood)
    assert [(o.kind, o.query, o.trap) for o in mine] == [(o.kind, o.query, o.trap) for o in theirs]
    assert [o.id for o in mine] == [o.id.replace("xde-", "xdeen-") for o in theirs]


@pytest.mark.parametrize(("name", "count"), [("debian-reference", 44), ("postgresql", 45), ("xquad-en", 44),
                                             ("debian-reference-de", 24), ("xquad-de", 44)])
def test_a_follow_up_set_passes_the_needle_rules_and_its_last_turns_lean_on_the_earlier(name: str, count: int) -> None:
    done = run(Path(__file__).resolve().parents[2] / "scripts" / "check_conversations.py", EVAL / name)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith(f"{count} conversations, ")
    assert done.stdout.strip().endswith("PASS")
    talks = load_conversations(EVAL / name / "conversations.jsonl")
    needles = {q.needle for q in load_questions(EVAL / name / "questions.jsonl")}
    assert all(2 <= len(t.turns) <= 3 for t in talks) and sum(len(t.turns) == 3 for t in talks) >= count // 4
    assert sum(t.needle in needles for t in talks) <= count // 4  # mostly passages the questions do not ask for
