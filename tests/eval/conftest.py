"""A tiny real evaluation shared by the eval tests: two dev-set chapters, their questions, ten OOD queries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

DEV_SET = Path(__file__).resolve().parents[2] / "eval" / "debian-reference"
TINY_FILES = ("pr01.en.html", "ch08.en.html")


@pytest.fixture(scope="session")
def tiny_set(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    corpus = root / "corpus"
    corpus.mkdir()
    for name in TINY_FILES:
        shutil.copy(DEV_SET / "corpus" / name, corpus / name)
    rows = [json.loads(line) for line in (DEV_SET / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    questions = root / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows if r["source"] in TINY_FILES), encoding="utf-8")
    ood = root / "ood.jsonl"
    ood.write_text("\n".join((DEV_SET / "ood.jsonl").read_text(encoding="utf-8").splitlines()[:10]) + "\n",
                   encoding="utf-8")
    # With phrases.jsonl beside them the folder is a dev set (`citerag eval --dev-set`).
    phrases = root / "phrases.jsonl"
    rows = [json.loads(line) for line in (DEV_SET / "phrases.jsonl").read_text(encoding="utf-8").splitlines()]
    phrases.write_text("".join(json.dumps(r) + "\n" for r in rows if r["source"] in TINY_FILES), encoding="utf-8")
    return {"root": root, "corpus": corpus, "questions": questions, "ood": ood, "phrases": phrases,
            "cache": root / "indexes"}


@pytest.fixture(scope="session")
def tiny_report(tiny_set: dict[str, Path]) -> dict[str, Any]:
    """Strategies A and E, dense and BM25, MiniLM, through the real indexer and retriever."""
    from citerag.eval.report import build_report
    from citerag.eval.runner import run_eval
    from citerag.eval.truth import load_ood, load_questions

    qs, ood = load_questions(tiny_set["questions"]), load_ood(tiny_set["ood"])
    run = run_eval(tiny_set["corpus"], qs, ood, strategies=["A", "E"], retrievers=["dense", "bm25"],
                   embedders=["all-MiniLM-L6-v2"], cache=tiny_set["cache"])
    return build_report(run, qs, ood, {"corpus": str(tiny_set["corpus"]), "embedders": ["all-MiniLM-L6-v2"]})
