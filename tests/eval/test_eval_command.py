"""`citerag eval` end to end, as a user runs it: real files, real exit codes, one-line errors."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from citerag.answer.generators.llama import packaged_gguf
from http_servers import LlamaServer

# These tests are about the evaluation machinery: MiniLM alone keeps them fast and their names stable.
MINILM = ("--embedders", "all-MiniLM-L6-v2")
DEV_SET = Path(__file__).resolve().parents[2] / "eval" / "debian-reference"
TINY_FILES = ("pr01.en.html", "ch08.en.html")  # the tiny set's chapters (conftest.py)


def citerag(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "citerag.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def first_run(tiny_set: dict[str, Path]) -> Path:
    out = tiny_set["root"] / "cli-1"
    done = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions",
                   tiny_set["questions"], "--ood", tiny_set["ood"], "--strategies", "E", "--retrievers", "dense,hybrid",
                   "--out", out,
                   "--cache", tiny_set["cache"])
    assert done.returncode == 0, done.stderr
    return out


def test_reports_are_written(first_run: Path) -> None:
    report = json.loads((first_run / "report.json").read_text(encoding="utf-8"))
    assert report["schema"] == "citerag-eval-report/1"
    assert [c["id"] for c in report["configurations"]] == ["E/dense/all-MiniLM-L6-v2", "E/hybrid/all-MiniLM-L6-v2"]
    assert report["ground_truth"]["questions"] == 8 and report["ground_truth"]["ood"] == 10
    assert set(report["queries"]["answerable"]["E/dense/all-MiniLM-L6-v2"]) == {
        f"dr-{t}-{s}" for t in ("01", "02", "27", "28") for s in ("doc", "ticket")}
    assert len(report["paired"]) == 1
    md = (first_run / "report.md").read_text(encoding="utf-8")
    assert "| E | dense | all-MiniLM-L6-v2 |" in md
    html = (first_run / "report.html").read_text(encoding="utf-8")
    assert html.count("data:image/png;base64,") >= 3 and "http" not in html.split("<body>")[1]
    pngs = sorted(p.name for p in first_run.glob("*.png"))  # the same pictures as files, for a README
    assert pngs == ["distances-E_dense_all-MiniLM-L6-v2.png", "recall.png", "sweep-E_dense_all-MiniLM-L6-v2.png"]
    assert all((first_run / p).read_bytes().startswith(b"\x89PNG") for p in pngs)


def test_report_json_holds_consistent_budget_metrics(first_run: Path) -> None:
    report = json.loads((first_run / "report.json").read_text(encoding="utf-8"))
    for c in report["configurations"]:
        m = c["metrics"]
        assert set(m) == {"recall@1", "recall@4", "recall@8", "recall@20", "mrr", "ndcg@10",
                          "budget@1000", "budget@2000", "budget@4000"}
        b1, b2, b4 = (m[f"budget@{b}"] for b in (1000, 2000, 4000))
        assert b1["value"] <= b2["value"] <= b4["value"] <= m["recall@20"]["value"]
        assert all(e["n"] == 8 and e["low"] <= e["value"] <= e["high"] for e in (b1, b2, b4))
        rows = report["queries"]["answerable"][c["id"]]
        # The estimate is the share of the per-query counts within the budget.
        assert b2["k"] == sum(r["chars"] is not None and r["chars"] <= 2000 for r in rows.values())
    assert set(report["paired"][0]["chars"]) == {"wins", "losses", "p"}
    md = (first_run / "report.md").read_text(encoding="utf-8")
    assert "## Recall at a context budget" in md and "| configuration | B@1000 | B@2000 | B@4000 |" in md
    assert "Recall at a context budget" in (first_run / "report.html").read_text(encoding="utf-8")


def test_gate_passes_against_an_equal_run_and_fails_on_a_damaged_corpus(
        first_run: Path, tiny_set: dict[str, Path]) -> None:
    common = ["eval", *MINILM, "--questions", tiny_set["questions"], "--ood", tiny_set["ood"], "--strategies", "E",
              "--retrievers", "dense,hybrid", "--no-html", "--baseline", first_run / "report.json", "--gate"]
    same = citerag(*common, "--corpus", tiny_set["corpus"], "--cache", tiny_set["cache"],
                   "--out", tiny_set["root"] / "cli-2")
    assert same.returncode == 0, same.stderr
    assert "gate: no significant regression" in same.stdout
    assert "note:" not in same.stderr
    # Made worse on purpose: the paragraph holding dr-01's needle loses its words.
    damaged = tiny_set["root"] / "damaged"
    shutil.copytree(tiny_set["corpus"], damaged)
    page = damaged / "pr01.en.html"
    needle = json.loads(tiny_set["questions"].read_text(encoding="utf-8").splitlines()[0])["needle"]
    pattern = r"\s+".join(re.escape(w) for w in needle.split())
    html, n = re.subn(pattern, "The figure is explained elsewhere.", page.read_text(encoding="utf-8"))
    assert n == 1
    page.write_text(html, encoding="utf-8")
    worse = citerag(*common, "--corpus", damaged, "--cache", tiny_set["root"] / "damaged-indexes",
                    "--out", tiny_set["root"] / "cli-3")
    assert worse.returncode == 1
    lines = worse.stderr.strip().splitlines()
    assert lines[-1].startswith("error: regression gate failed")
    assert "regression: E/dense/all-MiniLM-L6-v2: destroys dr-01 (not destroyed before)" in lines
    saved = json.loads((tiny_set["root"] / "cli-3" / "report.json").read_text(encoding="utf-8"))
    assert saved["baseline"]["passed"] is False
    # Without --gate the same comparison is reported but does not fail the command.
    told = citerag(*common[:-1], "--corpus", damaged, "--cache", tiny_set["root"] / "damaged-indexes",
                   "--out", tiny_set["root"] / "cli-4")
    assert told.returncode == 0 and "regression: E/dense" in told.stderr
    assert "no significant regression" not in told.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--strategies", "Z"], "unknown strategy Z"),
    (["--retrievers", "dense,colbert"], "unknown retriever colbert"),
    (["--gate"], "--gate needs --baseline"),
    (["--baseline", "/nonexistent/report.json"], "no such baseline report"),
    (["--embedders", "no-such-model"], "no-such-model"),
])
def test_user_errors_are_one_line(tiny_set: dict[str, Path], args: list[str], message: str) -> None:
    done = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions", tiny_set["questions"], "--out",
                   tiny_set["root"] / "cli-err", "--cache", tiny_set["root"] / "cache-err", *args)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr


def test_bad_ground_truth_is_one_line(tmp_path: Path, tiny_set: dict[str, Path]) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"id": "x", "truth": "t", "style": "doc", "query": "q"}\n', encoding="utf-8")
    done = citerag("eval", "--corpus", tiny_set["corpus"], "--questions", bad, "--out", tmp_path / "o")
    assert done.returncode == 1 and done.stderr.strip() == f"error: {bad}:1: missing or empty field(s) needle, source"


def test_a_dev_set_folder_is_one_command_and_exact_words_are_scored_apart(tiny_set: dict[str, Path]) -> None:
    out = tiny_set["root"] / "devset"
    done = citerag("eval", *MINILM, "--dev-set", tiny_set["root"], "--strategies", "E",
                   "--retrievers", "dense,adaptive",
                   "--cache", tiny_set["cache"], "--out", out, "--no-html")
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["settings"]["phrases"] == str(tiny_set["phrases"])
    assert report["ground_truth"]["phrases"] == 4 and report["ground_truth"]["questions"] == 8
    answerable, phrases = report["queries"]["answerable"], report["queries"]["phrases"]
    # Questions are never pasted text: adaptive ranks them by cosine and lexical evidence, not as exact words
    # (the distances it reports are dense's own, in its own order).
    adaptive, dense = answerable["E/adaptive/all-MiniLM-L6-v2"], answerable["E/dense/all-MiniLM-L6-v2"]
    assert adaptive.keys() == dense.keys()
    assert all(min(adaptive[q]["distances"]) == pytest.approx(min(dense[q]["distances"]), abs=1e-6)
               for q in dense)
    # Pasted words: each found first by adaptive; dense ranks some of them lower.
    assert {q: r["rank"] for q, r in phrases["E/adaptive/all-MiniLM-L6-v2"].items()} == {
        "dr-x01": 1, "dr-x02": 1, "dr-x18": 1, "dr-x19": 1}
    assert [r["rank"] for r in phrases["E/dense/all-MiniLM-L6-v2"].values()] != [1, 1, 1, 1]
    by_id = {c["id"]: c for c in report["configurations"]}
    assert by_id["E/adaptive/all-MiniLM-L6-v2"]["phrases"]["recall@4"]["value"] == 1.0
    assert "exact words R@4 1.000" in done.stdout
    assert "## Exact words" in (out / "report.md").read_text(encoding="utf-8")


def test_a_folder_that_is_no_dev_set_is_one_line(tmp_path: Path) -> None:
    done = citerag("eval", "--dev-set", tmp_path, "--out", tmp_path / "out")
    assert done.returncode != 0
    assert "is not a dev set: it needs a corpus" in done.stderr
    assert "Traceback" not in done.stderr


def test_conversations_are_measured_in_three_arms_or_two_without_an_llm(tiny_set: dict[str, Path]) -> None:
    rows = [json.loads(line) for line in (DEV_SET / "conversations.jsonl").read_text(encoding="utf-8").splitlines()]
    talks = tiny_set["root"] / "conversations.jsonl"
    kept = [r for r in rows if r["source"] in TINY_FILES]
    talks.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    out = tiny_set["root"] / "talks"
    done = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions", tiny_set["questions"],
                   "--strategies", "E", "--retrievers", "adaptive", "--conversations", talks, "--out", out,
                   "--cache", tiny_set["cache"])
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "followups.json").read_text(encoding="utf-8"))
    assert report["n"] == len(kept) >= 5 and report["llm"] is None
    assert set(report["arms"]) == {"alone", "folded"} and report["configuration"] == "E/adaptive/all-MiniLM-L6-v2"
    alone, folded = report["arms"]["alone"], report["arms"]["folded"]
    last = {r["id"]: r["turns"][-1] for r in kept}
    assert alone["queries"] == last  # the last turn as asked
    assert all(q.endswith("\n" + last[i]) for i, q in folded["queries"].items())
    assert folded["figures"]["mrr"]["value"] > alone["figures"]["mrr"]["value"]
    assert "| folded |" in (out / "followups.md").read_text(encoding="utf-8") and "| folded |" in done.stdout
    # The LLM arm through an OpenAI-compatible server: the packaged SmolLM2 behind llama.cpp's server.
    if importlib.util.find_spec("llama_cpp") is not None and (gguf := packaged_gguf()) is not None:
        server = LlamaServer(gguf, tiny_set["root"] / "llama-server.log")
        try:
            server.wait()
            done = citerag("eval", *MINILM, "--corpus", tiny_set["corpus"], "--questions", tiny_set["questions"],
                           "--strategies", "E", "--retrievers", "adaptive", "--conversations", talks, "--out", out,
                           "--cache", tiny_set["cache"], "--generator", "openai", "--openai-base-url",
                           server.base_url, "--openai-model", "smollm2")
        finally:
            server.stop()
        assert done.returncode == 0, done.stderr
        report = json.loads((out / "followups.json").read_text(encoding="utf-8"))
        assert report["llm"] == f"openai (smollm2 at {server.base_url})" and report["llm_failures"] == 0
        llm = report["arms"]["llm"]
        assert set(llm["queries"]) == set(last) and set(llm) >= {"figures", "paired_vs_alone", "paired_vs_folded"}
        # The model's rewrites (one line each), not the fold (which a reply it cannot use falls back to).
        assert any(q != folded["queries"][i] and "\n" not in q for i, q in llm["queries"].items())
    bad = citerag("eval", "--corpus", tiny_set["corpus"], "--questions", tiny_set["questions"], "--conversations",
                  talks, "--gate", "--baseline", talks, "--out", out)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("error:")
