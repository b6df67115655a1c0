"""`citerag eval --rerank` and `--generate` on the tiny set: real indexer, real reranker, real answer pipeline."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from citerag.eval.paired import paired_rr

# These tests are about the evaluation machinery: MiniLM alone keeps them fast and their names stable.
MINILM = ("--embedders", "all-MiniLM-L6-v2")


def citerag(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "citerag.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


GOLDLESS = "dr-02-doc"  # its gold answer is in no document, so no answer can hold it


def _with_gold(questions: Path, out: Path) -> Path:
    """The questions with a gold answer each, as a SQuAD-style set has: the needle itself, upper-cased and its
    spaces doubled (the comparison ignores case and spacing), except GOLDLESS's."""
    rows = [json.loads(line) for line in questions.read_text(encoding="utf-8").splitlines()]
    for r in rows:
        r["answer"] = "zebra quagga okapi" if r["id"] == GOLDLESS else r["needle"].upper().replace(" ", "  ")
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def reranked(tiny_set: dict[str, Path]) -> dict[str, Any]:
    """A dense run with --generate (which also builds the E index) on the questions with gold answers, a tiny
    reranker trained on that index, then one eval run with --rerank and --generate."""
    root = tiny_set["root"]
    ix = root / "rr-index"
    out = root / "cli-rr"
    first = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions",
                    _with_gold(tiny_set["questions"], root / "gold.jsonl"), "--ood", tiny_set["ood"],
                    "--strategies", "E", "--retrievers", "dense",
                    "--no-html", "--out", root / "gen",
                    "--cache", tiny_set["cache"], "--generate")
    assert first.returncode == 0, first.stderr
    shutil.copytree(tiny_set["cache"] / "all-MiniLM-L6-v2" / "E", ix)
    (ix / "config.toml").write_text('embedding_model = "all-MiniLM-L6-v2"\n')  # the model that index was built with
    trained = citerag("train-reranker", "--index", ix, "--out", root / "rr-model", "--pairs", "64", "--json")
    assert trained.returncode == 0, trained.stderr
    done = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions",
                   tiny_set["questions"], "--ood", tiny_set["ood"], "--strategies", "E", "--retrievers", "dense,hybrid",
                   "--out", out,
                   "--cache", tiny_set["cache"], "--rerank", root / "rr-model", "--shortlist", "25", "--generate")
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    plain = json.loads((root / "gen" / "report.json").read_text(encoding="utf-8"))
    return {"report": report, "out": out, "stdout": done.stdout, "plain": plain, "plain_stdout": first.stdout}


def test_rerank_adds_a_configuration_with_its_cost(reranked: dict[str, Any]) -> None:
    report = reranked["report"]
    ids = [c["id"] for c in report["configurations"]]
    assert ids == ["E/dense/all-MiniLM-L6-v2", "E/hybrid/all-MiniLM-L6-v2", "E/hybrid+rerank/all-MiniLM-L6-v2"]
    rr = report["configurations"][2]
    assert rr["retriever"] == "hybrid+rerank" and rr["queries"] == 8
    assert 0 <= rr["metrics"]["mrr"]["low"] <= rr["metrics"]["mrr"]["value"] <= rr["metrics"]["mrr"]["high"] <= 1
    cost = rr["rerank_latency"]
    assert cost["n"] == 18 and 0 < cost["p50_ms"] <= cost["p95_ms"] < 60_000  # 8 answerable + 10 OOD queries
    assert report["configurations"][0]["rerank_latency"] is None
    pair = next(p for p in report["paired"] if p["a"] == "E/hybrid/all-MiniLM-L6-v2" and p["b"] == ids[2])
    assert [t["k"] for t in pair["tests"]] == [1, 4, 8, 20]
    assert set(pair["rr"]) == {"wins", "losses", "p"} and pair["rr"]["wins"] + pair["rr"]["losses"] <= 8
    assert set(report["queries"]["answerable"][ids[2]]) == set(report["queries"]["answerable"][ids[0]])
    md = (reranked["out"] / "report.md").read_text(encoding="utf-8")
    assert "| E | hybrid+rerank | all-MiniLM-L6-v2 |" in md and "## Rerank cost per query" in md
    assert "hybrid+rerank" in (reranked["out"] / "report.html").read_text(encoding="utf-8")
    assert "rerank p50" in reranked["stdout"]


def test_generate_reports_answer_figures(reranked: dict[str, Any]) -> None:
    report = reranked["report"]
    a = report["answers"]
    assert a["configuration"] == "E/dense+rerank/all-MiniLM-L6-v2" and a["generator"] == "extractive"
    assert a["in_domain"] == 8 and a["ood"] == 10 and a["threshold"] == 0.675
    answered = a["in_domain"] - a["refused"]["count"]
    assert answered > 0
    # The extractive generator puts [n] on every sentence it writes.
    assert a["citation_accuracy"]["pooled"]["value"] == 1.0 and a["citation_accuracy"]["mean_over_answers"] == 1.0
    assert a["flagged"] == 0 and a["invalid_markers"] == 0
    assert 0 <= a["needle_supported"]["count"] <= a["needle_retrieved"] <= answered
    assert set(a["latency"]) >= {"retrieve", "rerank", "total"} and a["latency"]["total"]["n"] == 18
    assert a["latency"]["retrieve"]["p50_ms"] <= a["latency"]["retrieve"]["p99_ms"]
    assert a["judge"] is None
    md = (reranked["out"] / "report.md").read_text(encoding="utf-8")
    assert "## Answers" in md and "OOD answered (bluffs)" in md


def test_generate_matches_the_sweep_without_rerank(reranked: dict[str, Any]) -> None:
    """On plain dense retrieval the pipeline's gate is the sweep's gate: the same refusals and bluffs."""
    report = reranked["plain"]
    a, conf = report["answers"], report["configurations"][0]
    assert a["configuration"] == "E/dense/all-MiniLM-L6-v2"
    assert a["refused"]["count"] == conf["calibration"]["at_reference"]["refused"]
    assert a["bluffs"]["count"] == conf["calibration"]["at_reference"]["bluffs"]
    assert a["needle_retrieved"] == conf["calibration"]["at_reference"]["supported"]
    assert "rerank" not in a["latency"] and "answers E/dense/all-MiniLM-L6-v2 (extractive)" in reranked["plain_stdout"]


def test_generate_reports_the_gold_answer_share(reranked: dict[str, Any]) -> None:
    a = reranked["plain"]["answers"]
    rows = a["queries"]["answerable"]
    assert GOLDLESS in rows and rows[GOLDLESS]["gold_answer"] is False
    for q, r in rows.items():
        if r["refused"]:
            assert r["gold_answer"] is False
        elif r["needle_supported"] and q != GOLDLESS:  # a cited quote holds the needle, so its gold answer
            assert r["gold_answer"] is True
    held = sum(r["gold_answer"] for r in rows.values())
    g = a["gold_answer"]
    assert (g["count"], g["n"]) == (held, 8) and g["value"] == round(held / 8, 6)
    assert g["low"] <= g["value"] <= g["high"]
    assert a["needle_supported"]["count"] - 1 <= held <= a["in_domain"] - a["refused"]["count"]
    assert f"gold answer {held}/8" in reranked["plain_stdout"]
    md = (reranked["out"].parent / "gen" / "report.md").read_text(encoding="utf-8")
    assert f"| gold answer in the answer or its cited quotes | {held}/8 |" in md
    # A set without gold answers reports none.
    assert reranked["report"]["answers"]["gold_answer"] is None
    assert "gold answer" not in reranked["stdout"]


def test_judge_needs_generate(tiny_set: dict[str, Path]) -> None:
    done = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions", tiny_set["questions"], "--out",
                   tiny_set["root"] / "cli-judge", "--judge", "http://127.0.0.1:9/v1")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0] == "error: --judge needs --generate", done.stderr


def test_paired_reciprocal_rank() -> None:
    a = {"q1": 1, "q2": 3, "q3": None, "q4": 2}
    b = {"q1": 2, "q2": 3, "q3": None, "q4": None}
    assert paired_rr(a, b) == {"wins": 2, "losses": 0, "p": 0.5}
    assert paired_rr(b, a) == {"wins": 0, "losses": 2, "p": 0.5}
