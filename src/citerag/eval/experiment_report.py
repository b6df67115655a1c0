"""An experiment's report from the traces its requests left (citerag.app.experiments): per arm, requests, refusals,
the feedback rate and the helpful share with Wilson intervals, latency p50/p95, characters and tokens per query
and, given prices, the cost per query; between the arms, Fisher's exact test on the refusal rate and on the helpful
share (a two-proportion test that stays exact at the small counts feedback gives).

It counts what the trace store still holds: the newest `trace_keep` traces of the collection (10,000 by default).
An answer's helpfulness is its newest feedback; an answer nobody rated counts only in the feedback rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import fisher_exact

from citerag.app.collection import Collection
from citerag.app.models import AskOptions
from citerag.errors import CiteragError
from citerag.eval.metrics import estimate, latency
from citerag.trace.store import root_span, spans_named
from citerag.types import Experiment

ARMS = ("a", "b")


@dataclass(frozen=True)
class Prices:
    """What the generator's tokens cost, per million (the report's currency is the caller's)."""

    prompt: float
    completion: float


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 3) if values else None


def arm_figures(records: list[dict[str, Any]], options: dict[str, Any], prices: Prices | None) -> dict[str, Any]:
    n = len(records)
    roots = [root_span(r) for r in records]
    refused = sum(bool(s["attributes"].get("citerag.refused")) for s in roots)
    rated = [r["feedback"][-1] for r in records if r.get("feedback")]
    helpful = sum(bool(f.get("helpful")) for f in rated)
    generated = [g["attributes"] for r in records for g in spans_named(r, "citerag.generate")]
    tokens = [(int(a["citerag.generate.prompt_tokens"]), int(a["citerag.generate.completion_tokens"]))
              for a in generated if "citerag.generate.prompt_tokens" in a]
    cost = None
    if prices is not None and tokens:
        cost = round(float(np.mean([(p * prices.prompt + c * prices.completion) / 1e6 for p, c in tokens])), 8)
    elif (priced := [float(a["citerag.generate.cost"]) for a in generated if "citerag.generate.cost" in a]):
        cost = round(float(np.mean(priced)), 8)  # at the collection's token_prices when it answered
    return {"options": options, "requests": n, "refused": estimate(refused, n).as_json(),
            "feedback_rate": estimate(len(rated), n).as_json(), "helpful": estimate(helpful, len(rated)).as_json(),
            "latency": latency([float(s["duration_ms"]) / 1000 for s in roots]),
            "prompt_chars": _mean([float(a.get("citerag.generate.prompt_chars", 0)) for a in generated]),
            "output_chars": _mean([float(a.get("citerag.generate.output_chars", 0)) for a in generated]),
            "generated": len(generated), "tokens_reported": len(tokens),
            "prompt_tokens": _mean([float(p) for p, _ in tokens]),
            "completion_tokens": _mean([float(c) for _, c in tokens]), "cost_per_query": cost}


def _fisher(a: tuple[int, int], b: tuple[int, int]) -> dict[str, Any]:
    """Fisher's exact test on (successes, trials) of each arm; None where an arm has no trials."""
    if a[1] == 0 or b[1] == 0:
        return {"p": None, "odds_ratio": None}
    result = fisher_exact([[a[0], a[1] - a[0]], [b[0], b[1] - b[0]]])
    odds = float(result.statistic)
    return {"p": round(float(result.pvalue), 6), "odds_ratio": None if not np.isfinite(odds) else round(odds, 4)}


def report(collection: Collection, name: str | None = None, prices: Prices | None = None) -> dict[str, Any]:
    """The named experiment's report (default: the running one, else the newest)."""
    every = collection.store.experiments()
    chosen: Experiment | None = next((e for e in every if e.name == name), None) if name else \
        next(iter(every), None)
    if chosen is None:
        raise CiteragError(f"no experiment {name!r} in collection {collection.name!r}" if name else
                           f"collection {collection.name!r} has run no experiment: start one first")
    records = collection.traces.answers(text_only=False) if collection.traces is not None else []
    ours = [r for r in records if root_span(r)["attributes"].get("citerag.experiment") == chosen.name]
    arms = {arm: arm_figures([r for r in ours if root_span(r)["attributes"].get("citerag.arm") == arm],
                             chosen.a if arm == "a" else chosen.b, prices) for arm in ARMS}
    total = sum(arms[a]["requests"] for a in ARMS)

    def pair(field: str) -> tuple[tuple[int, int], tuple[int, int]]:
        found = [(int(arms[a][field]["k"]), int(arms[a][field]["n"])) for a in ARMS]
        return found[0], found[1]

    return {"experiment": chosen.name, "collection": collection.name, "split": chosen.split, "sticky": chosen.sticky,
            "started_at": chosen.started_at, "stopped_at": chosen.stopped_at, "requests": total,
            "b_share": estimate(arms["b"]["requests"], total).as_json(), "arms": arms,
            "tests": {"refused": _fisher(*pair("refused")), "helpful": _fisher(*pair("helpful"))},
            "traces_kept": collection.settings.trace_keep}


def report_lines(data: dict[str, Any]) -> list[str]:
    """The report as a terminal shows it."""
    def pct(e: dict[str, Any]) -> str:
        return "-" if not e["n"] else f"{e['value']:.1%} [{e['low']:.1%}, {e['high']:.1%}] ({int(e['k'])}/{e['n']})"

    share = data["b_share"]
    lines = [f"experiment {data['experiment']} on {data['collection']}: {data['requests']} requests, arm b "
             f"{pct(share)} (split {data['split']:.0%}, sticky per {data['sticky']}), started {data['started_at']}"
             + (f", stopped {data['stopped_at']}" if data["stopped_at"] else ", running")]
    for arm in ARMS:
        f = data["arms"][arm]
        lat = f["latency"]
        lines += [f"arm {arm} {f['options'] or '(the collection as configured)'}: {f['requests']} requests",
                  f"  refused {pct(f['refused'])}; feedback on {pct(f['feedback_rate'])}; helpful {pct(f['helpful'])}",
                  f"  latency p50 {lat['p50_ms']} ms, p95 {lat['p95_ms']} ms; per generated answer "
                  f"{f['prompt_chars']} chars in, {f['output_chars']} out; tokens "
                  + (f"{f['prompt_tokens']} in, {f['completion_tokens']} out ({f['tokens_reported']} reported)"
                     if f["tokens_reported"] else "not reported by the generator")
                  + (f"; cost per query {f['cost_per_query']}" if f["cost_per_query"] is not None else "")]
    for what, test in data["tests"].items():
        p = "n/a (an arm has none)" if test["p"] is None else f"p = {test['p']:.4g}"
        lines.append(f"{what}, a vs b: Fisher's exact test {p}")
    return lines


def replay_arm(collection: Collection, name: str | None, source: str) -> dict[str, Any]:
    """Arm `source`'s questions (those whose text was kept) asked again with the other arm's options, answered now:
    how many decisions (answered or refused) and first citations change."""
    every = collection.store.experiments()
    chosen = next((e for e in every if e.name == name), None) if name else next(iter(every), None)
    if chosen is None or source not in ARMS:
        raise CiteragError("no such experiment" if chosen is None else "--from is a or b")
    other = "b" if source == "a" else "a"
    options = AskOptions(**(chosen.b if other == "b" else chosen.a), experiment=f"{chosen.name}:replay", arm=other)
    records = collection.traces.answers() if collection.traces is not None else []
    asked = [r for r in records if root_span(r)["attributes"].get("citerag.experiment") == chosen.name
             and root_span(r)["attributes"].get("citerag.arm") == source]
    rows = []
    for record in asked:
        then = root_span(record)["attributes"]
        now = collection.ask(str(record["question"]), options)
        first_then = (then.get("citerag.hits.chunk_ids") or [None])[0]
        rows.append({"trace_id": record["trace_id"], "refused_then": bool(then.get("citerag.refused")),
                     "refused_now": now.refused, "first_chunk_then": first_then,
                     "first_document_now": now.citations[0].document_id if now.citations else None})
    changed = sum(r["refused_then"] != r["refused_now"] for r in rows)
    return {"experiment": chosen.name, "from": source, "through": other, "asked": len(rows),
            "decisions_changed": changed, "refused_then": sum(r["refused_then"] for r in rows),
            "refused_now": sum(r["refused_now"] for r in rows), "rows": rows}
