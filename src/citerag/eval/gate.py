"""The regression gate: compare a report with a baseline report, configuration by configuration.

It fails only on evidence: a configuration present in both that loses significantly on the paired sign
test (p < alpha) at any k of Recall@k, or at the context budget GATE_BUDGET (budget@2000) when both reports
carry per-query `chars` (baselines written before it do not: their budget is simply not gated), or that
destroys an answer (needle in no chunk) it did not destroy before. A raw drop in a point estimate alone never
fails it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from citerag.errors import CiteragError
from citerag.eval.metrics import RECALL_KS
from citerag.eval.paired import Paired, paired, paired_budget

ALPHA = 0.05
GATE_BUDGET = 2000  # characters, about a page read: the middle of metrics.BUDGETS


@dataclass
class Comparison:
    configuration: str
    queries: int  # answerable queries present in both reports
    tests: list[Paired]  # current vs baseline: wins = current finds it within k, baseline does not
    newly_destroyed: list[str]
    no_longer_destroyed: list[str]
    budget: Paired | None = None  # at GATE_BUDGET characters (k holds the budget); None: a report lacks chars

    def failures(self, alpha: float = ALPHA) -> list[str]:
        out = [f"{self.configuration}: loses at R@{t.k} ({t.wins} wins, {t.losses} losses, p = {t.p:.4f})"
               for t in self.tests if t.losses > t.wins and t.p < alpha]
        b = self.budget
        if b is not None and b.losses > b.wins and b.p < alpha:
            out.append(f"{self.configuration}: loses at budget@{b.k} ({b.wins} wins, {b.losses} losses, "
                       f"p = {b.p:.4f})")
        if self.newly_destroyed:
            out.append(f"{self.configuration}: destroys {', '.join(self.newly_destroyed)} (not destroyed before)")
        return out

    def as_json(self, alpha: float = ALPHA) -> dict[str, Any]:
        return {"configuration": self.configuration, "queries": self.queries,
                "tests": [t.as_json() for t in self.tests], "newly_destroyed": self.newly_destroyed,
                "no_longer_destroyed": self.no_longer_destroyed,
                "budget": None if self.budget is None else {"budget": self.budget.k, "wins": self.budget.wins,
                                                            "losses": self.budget.losses,
                                                            "p": round(self.budget.p, 6)},
                "failures": self.failures(alpha)}


@dataclass
class GateResult:
    comparisons: list[Comparison]
    only_current: list[str]
    only_baseline: list[str]
    alpha: float = ALPHA
    notes: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        return [f for c in self.comparisons for f in c.failures(self.alpha)]

    @property
    def passed(self) -> bool:
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "passed": self.passed, "failures": self.failures,
                "only_current": self.only_current, "only_baseline": self.only_baseline, "notes": self.notes,
                "comparisons": [c.as_json(self.alpha) for c in self.comparisons]}


def _ranks(report: dict[str, Any], setup: str) -> dict[str, int | None]:
    return {qid: r["rank"] for qid, r in report["queries"]["answerable"].get(setup, {}).items()}


def _chars(report: dict[str, Any], setup: str) -> dict[str, int | None] | None:
    """Characters to the needle per query; None when any row lacks them (a report older than budget@B), since
    a missing count must not read as a miss."""
    rows = report["queries"]["answerable"].get(setup, {})
    if any("chars" not in r for r in rows.values()):
        return None
    return {qid: r["chars"] for qid, r in rows.items()}


def _configurations(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    try:
        return {c["id"]: c for c in report["configurations"]}
    except (KeyError, TypeError):
        raise CiteragError("not a citerag eval report (no configurations)") from None


def compare(current: dict[str, Any], baseline: dict[str, Any], alpha: float = ALPHA) -> GateResult:
    now, before = _configurations(current), _configurations(baseline)
    if "queries" not in baseline or "answerable" not in baseline.get("queries", {}):
        raise CiteragError("the baseline report has no per-query results (queries.answerable)")
    result = GateResult([], sorted(now.keys() - before.keys()), sorted(before.keys() - now.keys()), alpha)
    if current.get("ground_truth", {}).get("fingerprint") != baseline.get("ground_truth", {}).get("fingerprint"):
        result.notes.append("the ground truth differs from the baseline's: only queries in both are paired")
    unbudgeted = False
    for cid in sorted(now.keys() & before.keys()):
        a, b = _ranks(current, cid), _ranks(baseline, cid)
        shared = a.keys() & b.keys()
        if not shared:
            result.notes.append(f"{cid}: no query in common with the baseline")
            continue
        destroyed_now, destroyed_before = set(now[cid]["destroyed"]), set(before[cid]["destroyed"])
        known = baseline.get("ground_truth", {}).get("truths")
        if known is not None:  # a truth the baseline never measured cannot regress
            destroyed_now &= set(known)
        ca, cb = _chars(current, cid), _chars(baseline, cid)
        budget = paired_budget(ca, cb, GATE_BUDGET) if ca is not None and cb is not None else None
        unbudgeted |= budget is None
        result.comparisons.append(Comparison(cid, len(shared), paired(a, b, RECALL_KS),
                                             sorted(destroyed_now - destroyed_before),
                                             sorted(destroyed_before - destroyed_now), budget))
    if unbudgeted:
        result.notes.append(f"a report has no per-query chars: budget@{GATE_BUDGET} is not gated")
    return result
