"""Answer-level figures for `citerag eval --generate`: every query through the real answer pipeline.

Refusals (answerable queries refused), bluffs (out-of-domain queries answered), citation accuracy (pooled over
the sentences of every answer, with a Wilson interval; the mean over answers beside it), needle-supported
answers (a validly cited source holds the needle), latency per stage, optional LLM-judge scores (citerag.eval.judge),
and,
for sets with gold answer spans (SQuAD-style), the share of answers whose text or cited quotes hold that span.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from citerag.answer.check import answer_figures
from citerag.answer.generators.base import Generator
from citerag.app.collection import Collection
from citerag.app.models import AskOptions
from citerag.eval.judge import JudgeModel, judge_answers
from citerag.eval.metrics import estimate, latency
from citerag.eval.truth import OodQuery, Question
from citerag.text import collapse
from citerag.types import Answer

STAGES = ("retrieve", "rerank", "generate", "total")


def _norm(text: str) -> str:
    return collapse(text).casefold()


def holds_gold(answer: Answer, gold: str) -> bool:
    """The answer text or a quote it validly cites contains `gold` (case-insensitive, whitespace collapsed):
    what the user is shown holds the answer. A refusal shows nothing, so never holds it."""
    if answer.refused:
        return False
    target = _norm(gold)
    if target in _norm(answer.answer):
        return True
    # Sources the answer does not cite are not shown as its support; without a check, count every source.
    cited = set(answer.check.cited) if answer.check is not None else {c.index for c in answer.citations}
    return any(c.index in cited and target in _norm(c.quote) for c in answer.citations)


def gold_answer_share(held: Sequence[bool]) -> dict[str, Any] | None:
    """{count, n, value, low, high} over the questions with a gold answer; None when the set has none."""
    if not held:
        return None
    e = estimate(sum(held), len(held))
    return {"count": sum(held), "n": len(held), "value": round(e.value, 6), "low": round(e.low, 6),
            "high": round(e.high, 6)}


def evaluate_answers(collection: Collection, questions: Sequence[Question], ood: Sequence[OodQuery],
                     options: AskOptions, *, judge: JudgeModel | None = None,
                     log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every query through `collection.ask(query, options)`; with `judge`, an LLM judge scores each answered
    in-domain question (citerag.eval.judge)."""
    settings = collection.settings.with_changes(**options.changes())
    generator: Generator = collection.generator(options)
    rows: dict[str, dict[str, Any]] = {}
    ood_rows: dict[str, dict[str, Any]] = {}
    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    answered: list[tuple[Question, Answer]] = []
    queries: list[Question | OodQuery] = [*questions, *ood]
    for q in queries:
        ans = collection.ask(q.query, options)
        for s in STAGES:
            if s in ans.timings:
                stages[s].append(ans.timings[s])
        if isinstance(q, Question):
            rows[q.id] = answer_figures(ans, q.needle)
            rows[q.id]["gold_answer"] = None if q.answer is None else holds_gold(ans, q.answer)
            if not ans.refused:
                answered.append((q, ans))
        else:
            ood_rows[q.id] = answer_figures(ans)
    n, n_ood = len(rows), len(ood_rows)
    refused = sum(r["refused"] for r in rows.values())
    bluffs = sum(not r["refused"] for r in ood_rows.values())
    checked = [r for r in rows.values() if not r["refused"] and r["citation_accuracy"] is not None]
    sentences = sum(r["sentences"] for r in checked)
    cited = sum(round(r["citation_accuracy"] * r["sentences"]) for r in checked)
    out: dict[str, Any] = {
        "generator": generator.name, "mode": settings.mode, "rerank": settings.rerank_model or None,
        "shortlist": settings.rerank_shortlist if settings.rerank_model else None, "threshold": settings.threshold,
        "max_sources": settings.max_sources,
        "in_domain": n, "ood": n_ood,
        "refused": {"count": refused, "share": estimate(refused, n).as_json()},
        "bluffs": {"count": bluffs, "share": estimate(bluffs, n_ood).as_json()},
        "citation_accuracy": {
            "over": "sentences of answered in-domain queries, pooled", "sentences": sentences, "cited": cited,
            "pooled": estimate(cited, sentences).as_json(),
            "mean_over_answers": round(float(np.mean([r["citation_accuracy"] for r in checked])), 6)
            if checked else None},
        "needle_supported": {"count": sum(bool(r["needle_supported"]) for r in rows.values()),
                             "share": estimate(sum(bool(r["needle_supported"]) for r in rows.values()), n).as_json(),
                             "of_answered": len(checked)},
        "needle_retrieved": sum(bool(r["needle_retrieved"]) for r in rows.values()),
        "flagged": sum(r["flagged"] for r in checked),
        "invalid_markers": sum(r["invalid_markers"] for r in checked),
        "latency": {s: latency(v) for s, v in stages.items() if v},
        "gold_answer": gold_answer_share([r["gold_answer"] for r in rows.values() if r["gold_answer"] is not None]),
        "judge": None,
        "queries": {"answerable": rows, "ood": ood_rows},
    }
    if judge is not None:
        out["judge"] = judge_answers(judge, answered, log)
    return out
