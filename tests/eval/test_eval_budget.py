"""Recall at a context budget: characters of quoted content read to the needle, its paired tests and its gate."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from citerag.eval.gate import GATE_BUDGET, compare
from citerag.eval.metrics import budget_at, budget_summary, chars_to_needle, recall_at
from citerag.eval.paired import paired_budget, paired_chars
from citerag.eval.runner import QueryResult, query_result
from citerag.eval.stats import sign_test, wilson
from citerag.eval.truth import OodQuery, Question

NEEDLE = "the needle sentence"
BASELINES = Path(__file__).resolve().parents[2] / "eval" / "baseline"


def _hit(rank: int, content: str) -> SimpleNamespace:
    # Only what query_result reads from a citerag.types.Hit.
    return SimpleNamespace(rank=rank, chunk=SimpleNamespace(id=100 + rank, content=content), cosine_distance=rank / 10,
                           lexical=0.0)


def _question(needle: str = NEEDLE) -> Question:
    return Question("q1", "t1", "doc", "where is it?", needle, "a.html")


def test_chars_to_needle_sums_in_rank_order_up_to_the_first_correct_chunk() -> None:
    assert chars_to_needle([1500, 10, 10], 1) == 1500
    assert chars_to_needle([800, 800, 300, 5000], 3) == 1900
    assert chars_to_needle([800, 800], None) is None
    with pytest.raises(ValueError):
        chars_to_needle([800], 2)


def test_query_result_counts_quoted_content_not_the_embedded_text() -> None:
    hits = [_hit(1, "a" * 800), _hit(2, "b" * 800), _hit(3, f"{NEEDLE} " + "c" * 280), _hit(4, f"{NEEDLE} again")]
    # Correctness reads the collapsed body (here with a long contextual header the reader never sees).
    bodies = {101: "a" * 800, 102: "b" * 800, 103: "[Title > Section] " * 50 + NEEDLE, 104: NEEDLE}
    r = query_result(hits, _question(), bodies)
    assert (r.rank, r.correct) == (3, [3, 4])
    assert r.chars == 1600 + len(NEEDLE) + 1 + 280
    assert r.as_json()["chars"] == r.chars
    # Hits handed over out of order are read in rank order all the same.
    assert query_result(list(reversed(hits)), _question(), bodies).chars == r.chars


def test_query_result_without_a_correct_chunk_has_no_chars() -> None:
    hits = [_hit(1, "x" * 100), _hit(2, "y" * 100)]
    bodies = {101: "x" * 100, 102: "y" * 100}
    assert query_result(hits, _question(), bodies).chars is None
    ood = query_result(hits, OodQuery("o1", "far", "what is the weather?"), bodies)
    assert (ood.rank, ood.chars, ood.correct) == (None, None, [])


def test_budget_metrics_on_hand_built_results() -> None:
    results = [
        QueryResult(1, [1], [0.1], chars=1500),  # one large chunk: inside 2000, not 1000
        QueryResult(3, [3], [0.1, 0.2, 0.3], chars=800 + 800 + 350),  # two chunks before the needle
        QueryResult(1, [1], [0.1], chars=400),
        QueryResult(2, [2], [0.1, 0.2], chars=3900),
        QueryResult(None, [], [0.5], chars=None),  # missed: outside every budget
    ]
    chars = [r.chars for r in results]
    s = budget_summary(chars)
    assert set(s) == {"budget@1000", "budget@2000", "budget@4000"}
    assert [s[f"budget@{b}"].k for b in (1000, 2000, 4000)] == [1, 3, 4]
    assert s["budget@2000"].value == pytest.approx(0.6)
    assert (s["budget@2000"].low, s["budget@2000"].high) == wilson(3, 5)
    assert budget_at(chars, 1500).k == 2  # the bound is inclusive
    # A budget never beats recall over the same hits: a needle not retrieved is never read.
    assert s["budget@4000"].value <= recall_at([r.rank for r in results], 20).value == 0.8


def test_paired_chars_fewer_characters_wins_and_a_miss_is_infinite() -> None:
    a = {"q1": 500, "q2": 3000, "q3": None, "q4": 900, "q5": None, "only_a": 10}
    b = {"q1": 700, "q2": 2500, "q3": 9000, "q4": 900, "q5": None, "only_b": 10}
    # q1 a fewer; q2 b fewer; q3 a missed, b found (any count beats a miss); q4 equal, q5 both missed: ties
    assert paired_chars(a, b) == {"wins": 1, "losses": 2, "p": round(sign_test(1, 2), 6)}
    assert paired_chars(b, a) == {"wins": 2, "losses": 1, "p": round(sign_test(2, 1), 6)}
    assert paired_chars({"q": None}, {"q": None}) == {"wins": 0, "losses": 0, "p": 1.0}


def test_paired_budget_counts_only_discordant_queries_at_the_budget() -> None:
    a = {"q1": 1500, "q2": 2500, "q3": None, "q4": 100}
    b = {"q1": 2100, "q2": 1900, "q3": 1999, "q4": 2000}
    t = paired_budget(a, b, 2000)
    assert (t.k, t.wins, t.losses) == (2000, 1, 2)  # q1 for a; q2, q3 for b; q4 both within
    assert t.p == sign_test(1, 2)


def _report(chars: list[int | None] | None, ranks: list[int | None]) -> dict[str, Any]:
    """A minimal report: one configuration, per-query rows with or without `chars` (older reports lack it)."""
    rows: dict[str, dict[str, Any]] = {}
    for i, rank in enumerate(ranks):
        rows[f"q{i}"] = {"rank": rank, "correct": [] if rank is None else [rank], "distances": [0.3]}
        if chars is not None:
            rows[f"q{i}"]["chars"] = chars[i]
    return {"configurations": [{"id": "E/dense/m", "destroyed": []}],
            "ground_truth": {"fingerprint": "same", "truths": []}, "queries": {"answerable": {"E/dense/m": rows}}}


def test_the_gate_fails_on_a_significant_budget_loss_when_both_reports_have_chars() -> None:
    ranks: list[int | None] = [1] * 8
    before = _report([1500] * 8, ranks)
    bigger = _report([2500] * 8, ranks)  # the same ranks, chunks too large to read within 2000 characters
    result = compare(bigger, before)
    assert result.failures == [f"E/dense/m: loses at budget@{GATE_BUDGET} (0 wins, 8 losses, p = 0.0078)"]
    assert result.as_json()["comparisons"][0]["budget"] == {"budget": 2000, "wins": 0, "losses": 8, "p": 0.007812}
    assert all(t.wins == t.losses == 0 for t in result.comparisons[0].tests)  # Recall@k alone sees nothing
    assert result.notes == []
    assert compare(before, bigger).passed  # the improvement never fails
    # Cheaper or dearer within the budget is no loss at the budget.
    assert compare(_report([1900] * 8, ranks), _report([600] * 8, ranks)).passed


def test_the_gate_accepts_a_baseline_without_chars_and_does_not_gate_the_budget() -> None:
    ranks: list[int | None] = [1] * 8
    old = _report(None, ranks)
    result = compare(_report([2500] * 8, ranks), old)
    assert result.passed and result.comparisons[0].budget is None
    assert result.as_json()["comparisons"][0]["budget"] is None
    assert result.notes == [f"a report has no per-query chars: budget@{GATE_BUDGET} is not gated"]
    # Nor the other way round; Recall@k is still gated.
    assert compare(old, _report([100] * 8, ranks)).comparisons[0].budget is None
    lost = compare(_report(None, [None] * 8), _report([100] * 8, ranks))
    assert lost.failures[0].startswith("E/dense/m: loses at R@1 (0 wins, 8 losses")


@pytest.mark.parametrize("name", sorted(p.name for p in BASELINES.glob("*.json")))
def test_the_committed_baselines_still_load_and_gate(name: str) -> None:
    base = json.loads((BASELINES / name).read_text(encoding="utf-8"))
    rows = [row for by_id in base["queries"]["answerable"].values() for row in by_id.values()]
    assert rows and all("chars" in row for row in rows)  # written after budget@B: every row carries chars
    result = compare(base, base)
    assert result.passed and result.comparisons and all(c.budget is not None for c in result.comparisons)
    older = copy.deepcopy(base)  # as a report written before budget@B: no chars, so the budget is not gated
    for by_id in older["queries"]["answerable"].values():
        for row in by_id.values():
            del row["chars"]
    for current, baseline in ((base, older), (older, base)):
        result = compare(current, baseline)
        assert result.passed and all(c.budget is None for c in result.comparisons)


def test_a_run_against_its_own_report_without_chars(tiny_report: dict[str, Any]) -> None:
    """The tiny run against itself with every `chars` removed from the baseline, as an older report.json."""
    old = copy.deepcopy(tiny_report)
    for rows in old["queries"]["answerable"].values():
        for row in rows.values():
            del row["chars"]
    result = compare(tiny_report, old)
    assert result.passed and all(c.budget is None for c in result.comparisons)
    assert compare(tiny_report, copy.deepcopy(tiny_report)).comparisons[0].budget is not None


def test_the_tiny_run_reports_consistent_budgets(tiny_report: dict[str, Any]) -> None:
    assert tiny_report["settings"]["budgets"] == [1000, 2000, 4000]
    for c in tiny_report["configurations"]:
        m = c["metrics"]
        values = [m[f"budget@{b}"]["value"] for b in (1000, 2000, 4000)]
        assert values == sorted(values) and values[-1] <= m["recall@20"]["value"]
        assert all(m[f"budget@{b}"]["n"] == c["queries"] for b in (1000, 2000, 4000))
        for row in tiny_report["queries"]["answerable"][c["id"]].values():
            # chars exists exactly when the needle was retrieved, and every chunk read holds a character
            assert (row["chars"] is None) == (row["rank"] is None)
            assert row["chars"] is None or row["chars"] >= row["rank"]
        assert all(r["chars"] is None for r in tiny_report["queries"]["ood"][c["id"]].values())
    for p in tiny_report["paired"]:
        assert set(p["chars"]) == {"wins", "losses", "p"} and p["chars"]["wins"] + p["chars"]["losses"] <= 8


def test_the_reported_refusals_apply_both_cuts_of_the_calibrated_rule() -> None:
    from citerag.eval.report import refusal_json
    from citerag.eval.runner import QueryResult
    from citerag.eval.truth import OodQuery

    rule = {"threshold": 0.5, "lexical_threshold": 0.6, "fitted_at": "", "documents": 1, "synthetic": 10,
            "synthetic_refused": 1, "bank": 10, "bank_answered": 0, "cost_ratio": 3.0}
    answerable = {"near": QueryResult(1, [1], [0.4, 0.7], 100, [0.1, 0.0]),
                  "worded": QueryResult(1, [1], [0.7, 0.8], 100, [0.65, 0.1]),  # far in meaning, holds its words
                  "lost": QueryResult(None, [], [0.7, 0.8], None, [0.3, 0.1])}
    ood = {"o1": QueryResult(None, [], [0.9], None, [0.61]), "o2": QueryResult(None, [], [0.9], None, [0.2])}
    queries = [OodQuery("o1", "near", "q1", trap=True), OodQuery("o2", "far", "q2")]
    r = refusal_json(rule, answerable, ood, queries)
    assert r is not None and r["lexical_threshold"] == 0.6
    assert r["refused"]["refused"] == ["lost"] and r["bluffs"]["traps"]["answered"] == ["o1"]
    # A rule fitted before the lexical cut (version 2) reads distances alone.
    older = refusal_json({**rule, "lexical_threshold": None}, answerable, ood, queries)
    assert older is not None and older["refused"]["refused"] == ["lost", "worded"] and older["bluffs"]["count"] == 0
