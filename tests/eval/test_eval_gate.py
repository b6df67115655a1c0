"""The regression gate on a real (tiny) evaluation, then on copies made worse on purpose."""

from __future__ import annotations

import copy
from typing import Any

from citerag.eval.gate import compare

E_DENSE = "E/dense/all-MiniLM-L6-v2"


def _ranks(report: dict[str, Any], setup: str) -> dict[str, Any]:
    return report["queries"]["answerable"][setup]


def test_equal_runs_pass(tiny_report: dict[str, Any]) -> None:
    result = compare(tiny_report, copy.deepcopy(tiny_report))
    assert result.passed and result.failures == []
    assert len(result.comparisons) == len(tiny_report["configurations"])
    assert all(t.wins == t.losses == 0 for c in result.comparisons for t in c.tests)


def test_a_significant_paired_loss_fails(tiny_report: dict[str, Any]) -> None:
    worse = copy.deepcopy(tiny_report)
    found = [q for q, r in _ranks(worse, E_DENSE).items() if r["rank"] is not None]
    assert len(found) >= 7  # E/dense finds nearly every needle of these two chapters within 20
    for q in found:
        _ranks(worse, E_DENSE)[q]["rank"] = None
    result = compare(worse, tiny_report)
    assert not result.passed
    assert any(f.startswith(f"{E_DENSE}: loses at R@20") for f in result.failures)
    # Only the damaged configuration fails.
    assert {f.split(":")[0] for f in result.failures} == {E_DENSE}
    # The other direction is an improvement, which never fails.
    assert compare(tiny_report, worse).passed


def test_a_raw_point_drop_alone_passes(tiny_report: dict[str, Any]) -> None:
    worse = copy.deepcopy(tiny_report)
    first = next(q for q, r in _ranks(worse, E_DENSE).items() if r["rank"] == 1)
    _ranks(worse, E_DENSE)[first]["rank"] = 2  # R@1 drops by one query in eight: not significant
    result = compare(worse, tiny_report)
    assert result.passed
    r1 = next(c for c in result.comparisons if c.configuration == E_DENSE).tests[0]
    assert (r1.k, r1.wins, r1.losses) == (1, 0, 1) and r1.p == 1.0


def test_a_newly_destroyed_answer_fails(tiny_report: dict[str, Any]) -> None:
    worse = copy.deepcopy(tiny_report)
    conf = next(c for c in worse["configurations"] if c["id"] == E_DENSE)
    conf["destroyed"] = ["dr-27"]
    result = compare(worse, tiny_report)
    assert result.failures == [f"{E_DENSE}: destroys dr-27 (not destroyed before)"]
    # Destroyed before and still destroyed (blind cuts, strategy A) is no regression.
    assert compare(tiny_report, copy.deepcopy(tiny_report)).passed


def test_configurations_in_one_report_only_are_listed_not_failed(tiny_report: dict[str, Any]) -> None:
    fewer = copy.deepcopy(tiny_report)
    fewer["configurations"] = [c for c in fewer["configurations"] if c["strategy"] == "E"]
    result = compare(fewer, tiny_report)
    assert result.passed and all(c.startswith("A/") for c in result.only_baseline)
