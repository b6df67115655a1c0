"""The needle rule on real chunking and real indexes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from citerag.eval.needle import check_needles, collapse, contains_needle, correct_ranks, destroyed
from citerag.eval.runner import extract_corpus, run_eval
from citerag.eval.truth import Question, load_questions

NEEDLE = "The popcon number preceded with \"V:\" for \"votes\" is calculated by"


def test_whitespace_runs_collapse_on_both_sides() -> None:
    chunk = "Intro.\n\nThe popcon number   preceded with \"V:\"\nfor \"votes\"\tis calculated by \"1000 * ...\""
    assert contains_needle(chunk, NEEDLE)
    assert contains_needle(chunk, NEEDLE.replace(" ", "\n  "))
    assert collapse("a \n\t b") == "a b"


def test_case_and_partial_needles_do_not_count() -> None:
    assert not contains_needle(NEEDLE.lower(), NEEDLE)
    assert not contains_needle(NEEDLE[:40], NEEDLE)  # a chunk holding half the needle
    assert correct_ranks(["nothing", NEEDLE + " more", "x " + NEEDLE], NEEDLE) == [2, 3]


def test_destroyed_lists_truths_found_in_no_chunk() -> None:
    qs = [Question("t1-doc", "t1", "doc", "q?", NEEDLE, "a.html"),
          Question("t1-ticket", "t1", "ticket", "q?", NEEDLE, "a.html"),
          Question("t2-doc", "t2", "doc", "q?", "never written anywhere at all", "a.html")]
    half = len(NEEDLE) // 2
    assert destroyed([NEEDLE[:half], NEEDLE[half:]], qs) == ["t1", "t2"]  # a cut through the needle
    assert destroyed(["x " + NEEDLE + " y"], qs) == ["t2"]


def test_blind_cuts_destroy_answers_on_the_dev_set(tiny_report: dict[str, Any]) -> None:
    by_id = {c["id"]: c for c in tiny_report["configurations"]}
    # Measured: 512-character blind cuts split two of the four needles of pr01 and ch08; boundaries keep them.
    assert by_id["A/dense/all-MiniLM-L6-v2"]["destroyed"] == ["dr-01", "dr-28"]
    assert by_id["E/dense/all-MiniLM-L6-v2"]["destroyed"] == []
    for setup in ("A/dense/all-MiniLM-L6-v2", "A/bm25/all-MiniLM-L6-v2"):
        results = tiny_report["queries"]["answerable"][setup]
        for qid in ("dr-01-doc", "dr-01-ticket", "dr-28-doc", "dr-28-ticket"):
            assert results[qid]["rank"] is None and results[qid]["correct"] == []  # never found
    assert tiny_report["ground_truth"]["problems"] == []


HEADING_DOC = """# Admin notes

Some words before the first section, about nothing in particular.

## Resetting a forgotten root password from the boot loader menu

Boot with init=/bin/sh, remount the root file system read-write and run passwd.

## Other things

The quick brown fox jumps over the lazy dog near the river bank every morning.
"""


@pytest.fixture(scope="module")
def heading_set(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heading")
    corpus = root / "corpus"
    corpus.mkdir()
    (corpus / "notes.md").write_text(HEADING_DOC, encoding="utf-8")
    rows = [
        {"id": "h-1-doc", "truth": "h-1", "style": "doc", "query": "How do I get back into a box whose admin "
         "password I forgot?", "needle": "Resetting a forgotten root password from the boot loader menu",
         "source": "notes.md"},
        {"id": "b-1-doc", "truth": "b-1", "style": "doc", "query": "How do I change the password from a shell?",
         "needle": "remount the root file system read-write and run passwd", "source": "notes.md"},
    ]
    questions = root / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return {"corpus": corpus, "questions": questions, "cache": root / "indexes"}


def test_a_needle_only_in_a_heading_does_not_count(heading_set: dict[str, Path]) -> None:
    qs = load_questions(heading_set["questions"])
    problems = check_needles(extract_corpus(sorted(heading_set["corpus"].iterdir())), qs)
    assert [(p.truth, p.problem) for p in problems] == [("h-1", "only in a heading")]
    run = run_eval(heading_set["corpus"], qs, [], strategies=list("ABCDEF"), retrievers=["dense"],
                   embedders=["all-MiniLM-L6-v2"], cache=heading_set["cache"])
    destroyed_by = {i.strategy: i.destroyed for i in run.indexes}
    # C-F cut section bodies, so no chunk holds a heading line; E and F repeat the heading in their
    # contextual header, which the rule leaves out, so the heading-only needle stays unmatched.
    for s in "CDEF":
        assert destroyed_by[s] == ["h-1"], s
        assert all(r.rank is None for q, r in run.answerable[f"{s}/dense/all-MiniLM-L6-v2"].items() if q == "h-1-doc")
    # Blind cuts (A, B) run over the whole text, heading lines included: the needle is found there,
    # which is why the ground-truth check reports it as a problem rather than leaving it to the strategies.
    assert destroyed_by["A"] == [] and destroyed_by["B"] == []
    # The body needle is found by every strategy.
    for s in "ABCDEF":
        assert run.answerable[f"{s}/dense/all-MiniLM-L6-v2"]["b-1-doc"].rank is not None
