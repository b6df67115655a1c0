"""An LLM judge through any OpenAI-compatible endpoint (`citerag eval --generate --judge URL --judge-model NAME`):
every answered in-domain question's answer scored 0-10 for correctness (against the needle and, where the set has
one, the gold answer), grounding (in the passages it cites) and conciseness, as JSON. The report names the judge's
model and the prompt's version, gives each mean with a 95% t interval, and, against a baseline report judged with
the same model and prompt, a paired Wilcoxon signed-rank test per criterion over the questions both judged.

A judge is only as good as its model. The packaged SmolLM2-135M tests the mechanics here; its scores mean little.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from citerag.answer.generators.base import GeneratorError
from citerag.eval.truth import Question
from citerag.types import Answer

CRITERIA = ("correctness", "grounding", "conciseness")
PROMPT_VERSION = "judge-2026-12-03"
CAVEAT = ("An LLM judge's scores are only as good as its model: a small local model (such as the packaged "
          "SmolLM2-135M) tests the mechanics, and its scores mean little.")
SYSTEM = ("You grade answers of a question-answering system. Reply with one JSON object and nothing else: "
          '{"correctness": N, "grounding": N, "conciseness": N}, each N an integer from 0 to 10.')
PROMPT = """Question: {question}
Reference (the passage that answers it): {needle}{gold}
The answer's sources:
{sources}
The answer: {answer}

correctness: 10 when the answer states what the reference says, 0 when it says something else or nothing.
grounding: 10 when every claim of the answer is supported by its sources, 0 when none is.
conciseness: 10 when it says only what was asked, 0 when it is padding or repetition.
Reply with the JSON object only."""


# Asked of the endpoint as its response format: a JSON object of this schema. llama.cpp's server (and vLLM) turn the
# schema into a grammar, so even a 135M model writes a verdict that parses; an endpoint that refuses the format
# (a 4xx) is asked again without it, and the prompt alone asks for the JSON.
SCHEMA = {"type": "object", "required": list(CRITERIA),
          "properties": {k: {"type": "integer", "minimum": 0, "maximum": 10} for k in CRITERIA}}
RESPONSE_FORMAT = {"type": "json_object", "schema": SCHEMA}


@dataclass
class JudgeModel:
    """Who judges: `complete(messages, response_format=None) -> text` (an OpenAI-compatible generator's), its
    model's name and where."""

    complete: Callable[..., str]
    model: str
    url: str
    constrained: bool = True  # False once the endpoint refused the response format

    def verdict(self, messages: list[dict[str, Any]]) -> str:
        if self.constrained:
            try:
                return self.complete(messages, response_format=RESPONSE_FORMAT)
            except GeneratorError as exc:
                if not re.search(r"HTTP 4\d\d", str(exc)):
                    raise
                self.constrained = False
        return self.complete(messages)


def parse_verdict(text: str) -> dict[str, float] | None:
    """The first JSON object in `text` with all three scores, each clamped to 0-10; None if there is none."""
    for match in re.finditer(r"\{[^{}]*\}", text):
        try:
            data = json.loads(match.group(0))
            scores = {k: float(data[k]) for k in CRITERIA}
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
        if all(math.isfinite(v) for v in scores.values()):
            return {k: min(10.0, max(0.0, v)) for k, v in scores.items()}
    return None


def messages(question: Question, answer: Answer) -> list[dict[str, Any]]:
    sources = "\n".join(f"[{c.index}] {' '.join(c.quote.split())}" for c in answer.citations) or "(none)"
    gold = f"\nThe expected answer: {question.answer}" if question.answer else ""
    user = PROMPT.format(question=question.query, needle=question.needle, gold=gold, sources=sources,
                         answer=answer.answer)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def mean_interval(values: Sequence[float]) -> dict[str, Any]:
    """The mean with a 95% Student t interval (None where fewer than two values)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = float(np.mean(values))
    if n < 2 or float(np.std(values)) == 0.0:
        return {"mean": round(mean, 4), "low": round(mean, 4) if n >= 2 else None,
                "high": round(mean, 4) if n >= 2 else None, "n": n}
    low, high = stats.t.interval(0.95, n - 1, loc=mean, scale=stats.sem(values))
    return {"mean": round(mean, 4), "low": round(float(low), 4), "high": round(float(high), 4), "n": n}


def judge_answers(judge: JudgeModel, answered: Sequence[tuple[Question, Answer]],
                  log: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Every answered question judged: per-question scores (None where the verdict could not be read, or the
    judge failed), and the means with intervals."""
    per_query: dict[str, dict[str, float] | None] = {}
    failed = 0
    for question, answer in answered:
        try:
            per_query[question.id] = parse_verdict(judge.verdict(messages(question, answer)))
        except GeneratorError:
            per_query[question.id] = None
            failed += 1
    good = [s for s in per_query.values() if s is not None]
    log(f"judge {judge.model}: {len(good)} of {len(per_query)} verdicts read ({failed} calls failed)")
    return {"model": judge.model, "url": judge.url, "prompt_version": PROMPT_VERSION, "scale": "0-10",
            "response_format": "json schema" if judge.constrained else "prompt only",
            "judged": len(per_query), "parsed": len(good), "failed": failed, "caveat": CAVEAT,
            "criteria": {k: mean_interval([s[k] for s in good]) for k in CRITERIA}, "per_query": per_query}


def paired_against(current: dict[str, Any], baseline: dict[str, Any] | None) -> dict[str, Any] | None:
    """Wilcoxon signed-rank tests, per criterion, of this judge's scores against a baseline report's, over the
    questions both judged; None when the baseline has no judge, or another judge model or prompt."""
    if not baseline or baseline.get("model") != current["model"] or \
            baseline.get("prompt_version") != current["prompt_version"]:
        return None
    both = [q for q, s in current["per_query"].items() if s is not None and baseline["per_query"].get(q)]
    out: dict[str, Any] = {"questions": len(both)}
    for k in CRITERIA:
        diffs = [current["per_query"][q][k] - baseline["per_query"][q][k] for q in both]
        wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        p = float(stats.wilcoxon(diffs).pvalue) if wins + losses else 1.0
        out[k] = {"mean_difference": round(float(np.mean(diffs)), 4) if diffs else None, "better": wins,
                  "worse": losses, "p": round(p, 6)}
    return out
