"""report.json (schema: docs/eval-report.md) and report.md, built from a Run."""

from __future__ import annotations

import itertools
import statistics
from datetime import UTC, datetime
from typing import Any

from citerag import PIPELINE_VERSION, __version__
from citerag.eval.calibrate import Calibration, Scored, calibrate
from citerag.eval.gate import GateResult
from citerag.eval.metrics import BUDGETS, RECALL_KS, budget_summary, estimate, latency, recall_curve, summary
from citerag.eval.paired import paired, paired_chars, paired_rr
from citerag.eval.runner import DEPTH, QueryResult, Run
from citerag.eval.truth import OodQuery, Question, fingerprint
from citerag.settings import DEFAULT_ENCODER

SCHEMA = "citerag-eval-report/1"
PRIMARY = ("E", "adaptive", DEFAULT_ENCODER)  # the shipped default


def _scored(results: dict[str, QueryResult]) -> list[Scored]:
    return [Scored(r.distances, r.correct) for r in results.values()]


def _calibration_json(c: Calibration) -> dict[str, Any]:
    return {"cost_ratio": c.cost_ratio,
            "worst_in_domain": None if c.worst_inside is None else round(c.worst_inside, 6),
            "best_ood": None if c.best_ood is None else round(c.best_ood, 6),
            "in_domain_best": [round(d, 6) for d in c.inside_best],
            "ood_best": [round(d, 6) for d in c.ood_best],
            "recommended": c.recommended.as_json(),
            "at_reference": c.reference.as_json() if c.reference else None,
            "sweep": [r.as_json() for r in c.sweep]}


def _answered(r: QueryResult, cut: float, lexical: float | None = None) -> bool:
    """The calibrated rule answers when a hit lies under its cut or holds its lexical cut's share of the
    question's lexical evidence (the gate then keeps up to max_sources)."""
    return any(d < cut for d in r.distances) or (lexical is not None and any(x >= lexical for x in r.lexical))


def refusal_json(rule: dict[str, Any] | None, answerable: dict[str, QueryResult], ood: dict[str, QueryResult],
                 queries: list[OodQuery]) -> dict[str, Any] | None:
    """The calibrated rule of a configuration's index, measured: refusals among the answerable questions and
    bluffs (answered) among the out-of-domain ones, the near-domain traps, other near and far ones apart."""
    if rule is None:
        return None
    cut, lexical = float(rule["threshold"]), rule.get("lexical_threshold")
    refused = sum(not _answered(r, cut, lexical) for r in answerable.values())
    groups = {"far": [o for o in queries if o.kind == "far"],
              "near": [o for o in queries if o.kind != "far" and not o.trap],
              "traps": [o for o in queries if o.trap]}
    answered = {o.id for o in queries if o.id in ood and _answered(ood[o.id], cut, lexical)}
    bluffs = {name: {"count": sum(o.id in answered for o in qs), "n": len(qs),
                     "share": estimate(sum(o.id in answered for o in qs), len(qs)).as_json(),
                     "answered": sorted(o.id for o in qs if o.id in answered)} for name, qs in groups.items()}
    return {"threshold": cut, "lexical_threshold": lexical, "fitted_at": rule["fitted_at"],
            "documents": rule["documents"],
            "synthetic": rule["synthetic"], "synthetic_refused": rule["synthetic_refused"],
            "bank": rule["bank"], "bank_answered": rule["bank_answered"], "cost_ratio": rule["cost_ratio"],
            "refused": {"count": refused, "n": len(answerable),
                        "share": estimate(refused, len(answerable)).as_json(),
                        "refused": sorted(q for q, r in answerable.items() if not _answered(r, cut, lexical))},
            "bluffs": {"count": len(answered), "n": len(queries),
                       "share": estimate(len(answered), len(queries)).as_json(), **bluffs}}


def build_report(run: Run, questions: list[Question], ood: list[OodQuery], settings: dict[str, Any],
                 cost_ratio: float = 3.0, reference_threshold: float = 0.675, max_sources: int = 4,
                 phrases: list[Question] | None = None) -> dict[str, Any]:
    truths = sorted({q.truth for q in questions})
    index_of = {(i.embedder, i.strategy): i for i in run.indexes}
    configurations = []
    for s in run.setups:
        ranks = [r.rank for r in run.answerable[s.id].values()]
        chars = [r.chars for r in run.answerable[s.id].values()]
        info = index_of[(s.embedder, s.strategy)]
        cal = calibrate(_scored(run.answerable[s.id]), _scored(run.ood[s.id]), cost_ratio, max_sources,
                        reference_threshold)
        configurations.append({
            "id": s.id, "embedder": s.embedder, "strategy": s.strategy, "retriever": s.retriever,
            "queries": len(ranks),
            "metrics": {name: e.as_json() for name, e in {**summary(ranks), **budget_summary(chars)}.items()},
            "destroyed": info.destroyed,
            "destroyed_share": estimate(len(info.destroyed), len(truths)).as_json(),
            "recall_curve": [round(x, 6) for x in recall_curve(ranks, DEPTH)],
            "calibration": _calibration_json(cal),
            "refusal_rule": refusal_json(run.refusal.get(f"{s.embedder}/{s.strategy}"), run.answerable[s.id],
                                         run.ood[s.id], ood),
            "rerank_latency": latency(run.latency[s.id]) if s.id in run.latency else None,
            "phrases": ({name: e.as_json() for name, e in
                         summary([r.rank for r in run.phrases[s.id].values()]).items()}
                        if s.id in run.phrases else None),
        })
    pairs = []
    for a, b in itertools.combinations(run.setups, 2):
        ra = {q: r.rank for q, r in run.answerable[a.id].items()}
        rb = {q: r.rank for q, r in run.answerable[b.id].items()}
        ca = {q: r.chars for q, r in run.answerable[a.id].items()}
        cb = {q: r.chars for q, r in run.answerable[b.id].items()}
        pair = {"a": a.id, "b": b.id, "tests": [t.as_json() for t in paired(ra, rb, RECALL_KS)],
                "rr": paired_rr(ra, rb), "chars": paired_chars(ca, cb)}
        if a.id in run.phrases and b.id in run.phrases:
            pa = {q: r.rank for q, r in run.phrases[a.id].items()}
            pb = {q: r.rank for q, r in run.phrases[b.id].items()}
            pair["phrases"] = {"tests": [t.as_json() for t in paired(pa, pb, RECALL_KS)], "rr": paired_rr(pa, pb)}
        pairs.append(pair)
    return {
        "schema": SCHEMA,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "citerag_version": __version__,
        "pipeline_version": PIPELINE_VERSION,
        "settings": {**settings, "depth": DEPTH, "recall_ks": list(RECALL_KS),
                     "budgets": list(BUDGETS), "cost_ratio": cost_ratio,
                     "reference_threshold": reference_threshold, "max_sources": max_sources,
                     "match": "whitespace-collapsed needle in the chunk's embedded text less its contextual header"},
        "ground_truth": {"questions": len(questions), "truths": truths, "ood": len(ood),
                         "phrases": len(phrases or []),
                         "fingerprint": fingerprint(questions, ood),
                         "problems": [{"truth": p.truth, "problem": p.problem} for p in run.needle_problems]},
        "timing": {"total_seconds": round(run.seconds, 2),
                   "steps": {k: round(v, 2) for k, v in run.timings.items()}},
        "indexes": [i.as_json() for i in run.indexes],
        "configurations": configurations,
        "paired": pairs,
        "answers": None if run.answers is None else {**run.answers, "configuration": _answer_config(run.answers)},
        "queries": {"answerable": _per_query(run.answerable), "ood": _per_query(run.ood),
                    "phrases": _per_query(run.phrases)},
        "baseline": None,
    }


def _answer_config(a: dict[str, Any]) -> str:
    return f"{a['strategy']}/{a['mode']}{'+rerank' if a.get('rerank') else ''}/{a['embedder']}"


def _per_query(results: dict[str, dict[str, QueryResult]]) -> dict[str, dict[str, Any]]:
    return {sid: {q: r.as_json() for q, r in res.items()} for sid, res in results.items()}


def attach_baseline(report: dict[str, Any], path: str, result: GateResult) -> None:
    report["baseline"] = {"path": path, **result.as_json()}


def primary(report: dict[str, Any]) -> dict[str, Any]:
    """The configuration the threshold pictures describe: E/dense with the default encoder when present, else the
    first."""
    confs = report["configurations"]
    want = f"{PRIMARY[0]}/{PRIMARY[1]}/{PRIMARY[2]}"
    return next((c for c in confs if c["id"] == want), confs[0])


def window_cell(index: dict[str, Any]) -> str:
    """Chunks over the encoder's window, or "no window" for encoders without one (USE)."""
    return "no window" if index["max_tokens"] >= 1_000_000 else f"{index['over_window']} (> {index['max_tokens']})"


def _est(m: dict[str, Any]) -> str:
    return f"{m['value']:.3f} [{m['low']:.3f}, {m['high']:.3f}]"


def headline_rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for c in report["configurations"]:
        m = c["metrics"]
        rows.append([c["strategy"], c["retriever"], c["embedder"], _est(m["recall@1"]), _est(m["recall@4"]),
                     _est(m["recall@8"]), _est(m["recall@20"]), _est(m["mrr"]), _est(m["ndcg@10"]),
                     f"{len(c['destroyed'])}/{len(report['ground_truth']['truths'])}"])
    return rows


HEADLINE_HEAD = ["strategy", "retriever", "embedder", "R@1", "R@4", "R@8", "R@20", "MRR", "nDCG@10", "destroyed"]


def budget_head(report: dict[str, Any]) -> list[str]:
    return ["configuration", *[f"B@{b}" for b in report["settings"]["budgets"]], "R@20", "median chars"]


def budget_rows(report: dict[str, Any]) -> list[list[str]]:
    """Recall at each context budget beside R@20 (its ceiling: a needle not retrieved is never read), and the
    median characters read to the needle over the queries that reach it."""
    rows = []
    for c in report["configurations"]:
        m = c["metrics"]
        found = sorted(r["chars"] for r in report["queries"]["answerable"][c["id"]].values()
                       if r.get("chars") is not None)
        median = "-" if not found else f"{statistics.median(found):.0f}"
        rows.append([c["id"], *[_est(m[f"budget@{b}"]) for b in report["settings"]["budgets"]],
                     _est(m["recall@20"]), median])
    return rows


BUDGET_NOTE = ("B@n: share of answerable queries whose needle is reached within n characters of quoted content "
               "(each hit's chunk as cited), read in rank order up to and including the first correct chunk. "
               "Median chars: over the queries whose needle is retrieved.")


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _p(t: dict[str, Any]) -> str:
    star = "*" if t["p"] < 0.05 else ""
    return f"{t['wins']}:{t['losses']} p={t['p']:.3g}{star}"


def paired_head(st: dict[str, Any]) -> list[str]:
    return ["A", "B", *[f"R@{k}" for k in st["recall_ks"]], "RR", "chars"]


def paired_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per pair: Recall@k tests, then RR and chars ("-" where a pair lacks them)."""
    return [[p["a"], p["b"], *[_p(t) for t in p["tests"]], *[_p(p[key]) if p.get(key) else "-"
                                                             for key in ("rr", "chars")]] for p in report["paired"]]


def answer_rows(a: dict[str, Any]) -> list[list[str]]:
    ca, ns = a["citation_accuracy"], a["needle_supported"]
    rows = [["in-domain refused", f"{a['refused']['count']}/{a['in_domain']}", _est(a["refused"]["share"])],
            ["OOD answered (bluffs)", f"{a['bluffs']['count']}/{a['ood']}", _est(a["bluffs"]["share"])],
            ["citation accuracy (sentences, pooled)", f"{ca['cited']}/{ca['sentences']}", _est(ca["pooled"])],
            ["citation accuracy (mean over answers)", "-",
             "-" if ca["mean_over_answers"] is None else f"{ca['mean_over_answers']:.3f}"],
            ["needle-supported answers", f"{ns['count']}/{a['in_domain']}", _est(ns["share"])],
            ["answers with no valid citation", str(a["flagged"]), "-"]]
    g = a.get("gold_answer")
    if g:
        rows.append(["gold answer in the answer or its cited quotes", f"{g['count']}/{g['n']}", _est(g)])
    j = a.get("judge")
    for criterion, c in (j or {}).get("criteria", {}).items():
        interval = "" if c["low"] is None else f" [{c['low']:.2f}, {c['high']:.2f}]"
        rows.append([f"judge: {criterion} (0-10)", f"{c['n']}/{j['judged']}",  # type: ignore[index]
                     "-" if c["mean"] is None else f"{c['mean']:.2f}{interval}"])
    return rows


def judge_lines(a: dict[str, Any]) -> list[str]:
    """Who judged, with which prompt, what that is worth, and the paired test against the baseline's judge."""
    j = a.get("judge")
    if not j:
        return []
    lines = [f"Judge: {j['model']} at {j['url']}, prompt {j['prompt_version']} ({j['response_format']}); "
             f"{j['parsed']} of {j['judged']} verdicts read. {j['caveat']}"]
    paired = j.get("against_baseline")
    if paired:
        lines.append(f"Against the baseline's judge, over {paired['questions']} questions both judged (Wilcoxon "
                     "signed-rank): " + "; ".join(
                         f"{k} {paired[k]['mean_difference']:+.2f} ({paired[k]['better']} better, {paired[k]['worse']}"
                         f" worse, p={paired[k]['p']:.3g})" for k in ("correctness", "grounding", "conciseness")
                         if paired[k]["mean_difference"] is not None) + ".")
    return lines


def latency_rows(a: dict[str, Any]) -> list[list[str]]:
    return [[s, str(v["n"]), f"{v['p50_ms']:.1f}", f"{v['p95_ms']:.1f}", f"{v['p99_ms']:.1f}"]
            for s, v in a["latency"].items()]


def answers_markdown(a: dict[str, Any]) -> list[str]:
    return ["## Answers", "",
            f"`{a['configuration']}` through the answer pipeline, generator {a['generator']}, threshold "
            f"{a['threshold']:g}, at most {a['max_sources']} sources.", "",
            _table(["figure", "count", "value [95%]"], answer_rows(a)), "",
            *[line + "\n" for line in judge_lines(a)],
            "Latency per stage (ms; refusals have no generate stage):", "",
            _table(["stage", "queries", "p50", "p95", "p99"], latency_rows(a)), ""]


def phrases_markdown(report: dict[str, Any]) -> list[str]:
    """The exact-words queries: what a user pastes from a document (a phrase, an option, an error message)."""
    ks = report["settings"]["recall_ks"]
    rows = [[c["id"], *[_est(c["phrases"][f"recall@{k}"]) for k in (1, 4)], _est(c["phrases"]["mrr"])]
            for c in report["configurations"] if c.get("phrases")]
    pairs = [[p["a"], p["b"], *[_p(t) for t in p["phrases"]["tests"]],
              _p(p["phrases"]["rr"]) if p["phrases"]["rr"] else "-"] for p in report["paired"] if p.get("phrases")]
    return ["## Exact words", "",
            f"{report['ground_truth']['phrases']} queries pasted verbatim from the corpus (phrases, identifiers, "
            "error messages), each occurring once; correct = the chunk holds the needle around it.", "",
            _table(["configuration", "R@1", "R@4", "MRR"], rows), "",
            *([_table(["A", "B", *[f"R@{k}" for k in ks], "RR"], pairs), ""] if pairs else [])]


def refusal_markdown(report: dict[str, Any]) -> list[str]:
    """The calibrated rule's section: chosen by `citerag calibrate` on synthetic questions and the bank, never on
    these questions."""
    rows = []
    for c in report["configurations"]:
        r = c.get("refusal_rule")
        if not r:
            continue
        b = r["bluffs"]
        lexical = r.get("lexical_threshold")
        rows.append([c["id"], f"{r['threshold']:.3f}", "-" if lexical is None else f"{lexical:.3f}",
                     f"{r['synthetic_refused']}/{r['synthetic']}",
                     f"{r['bank_answered']}/{r['bank']}", f"{r['refused']['count']}/{r['refused']['n']} "
                     + _est(r["refused"]["share"]), f"{b['count']}/{b['n']} " + _est(b["share"]),
                     *[f"{b[g]['count']}/{b[g]['n']}" for g in ("near", "traps", "far")]])
    if not rows:
        return []
    return ["## Calibrated refusal rule", "",
            "Each index's own rule, fitted without a labelled question: synthetic in-domain questions made from "
            "its chunks against citerag's bank of out-of-domain questions. Refused: answerable questions with no "
            "hit under the cut nor at the lexical cut (a hit holding that share of the question's lexical "
            "evidence; the ranking's own figure, so dense and BM25 alone see less of it); bluffs: out-of-domain "
            "questions answered. Wilson 95% intervals.", "",
            _table(["configuration", "cut", "lexical cut", "synthetic refused", "bank answered", "answerable refused",
                    "OOD answered", "near", "traps", "far"], rows), ""]


def to_markdown(report: dict[str, Any]) -> str:
    gt, st = report["ground_truth"], report["settings"]
    out = [f"# citerag evaluation ({report['created']})", "",
           f"{gt['questions']} answerable queries over {len(gt['truths'])} truths, {gt['ood']} out-of-domain queries; "
           f"corpus `{st.get('corpus')}`. Wilson 95% intervals in brackets. Total time "
           f"{report['timing']['total_seconds']:.0f} s.", ""]
    if gt["problems"]:
        out += ["Ground-truth problems: " + "; ".join(f"{p['truth']}: {p['problem']}" for p in gt["problems"]), ""]
    out += ["## Retrieval", "", _table(HEADLINE_HEAD, headline_rows(report)), "",
            "MRR is over the top 20; nDCG@10 uses binary relevance with the first correct chunk as the only "
            "relevant item. Destroyed: truths whose needle is in no chunk of the index.", "",
            "## Recall at a context budget", "", _table(budget_head(report), budget_rows(report)), "",
            BUDGET_NOTE, ""]
    destroyed = {(c["embedder"], c["strategy"]): c["destroyed"] for c in report["configurations"]}
    lost = [f"{e}/{s}: {', '.join(d)}" for (e, s), d in destroyed.items() if d]
    if lost:
        out += ["Destroyed answers: " + "; ".join(lost), ""]
    out += ["## Indexes", "", _table(
        ["embedder", "strategy", "docs", "chunks", "over window", "header tokens", "embedded now", "seconds"],
        [[i["embedder"], i["strategy"], str(i["documents"]), str(i["chunks"]),
          window_cell(i), f"{i['header_share']:.1%}", str(i["reembedded"]),
          f"{i['seconds']:.1f}"] for i in report["indexes"]]), ""]
    failed = [f"{f['source_path']}: {f['error']}" for i in report["indexes"] for f in i["failed"]]
    if failed:
        out += ["Not indexed: " + "; ".join(sorted(set(failed))), ""]
    out += ["## Threshold calibration", "",
            f"Under the real gate (at most {st['max_sources']} hits with cosine distance under the cut). "
            f"Recommended: minimum of {st['cost_ratio']:g} × bluff rate + refusal rate.", "",
            _table(["configuration", "worst in-domain", "best OOD", "recommended", "refused", "bluffs",
                    f"at {st['reference_threshold']}: refused", "bluffs"],
                   [[c["id"], f"{c['calibration']['worst_in_domain']:.3f}", f"{c['calibration']['best_ood']:.3f}",
                     f"{c['calibration']['recommended']['threshold']:.3f}",
                     f"{c['calibration']['recommended']['refused']}/{c['queries']}",
                     f"{c['calibration']['recommended']['bluffs']}/{gt['ood']}",
                     f"{c['calibration']['at_reference']['refused']}/{c['queries']}",
                     f"{c['calibration']['at_reference']['bluffs']}/{gt['ood']}"]
                    for c in report["configurations"] if c["calibration"]["worst_in_domain"] is not None
                    and c["calibration"]["best_ood"] is not None]), ""]
    if gt.get("phrases"):
        out += phrases_markdown(report)
    out += refusal_markdown(report)
    cost = [c for c in report["configurations"] if c.get("rerank_latency")]
    if cost:
        out += ["## Rerank cost per query", "",
                _table(["configuration", "queries", "p50 ms", "p95 ms"],
                       [[c["id"], str(c["rerank_latency"]["n"]), f"{c['rerank_latency']['p50_ms']:.1f}",
                         f"{c['rerank_latency']['p95_ms']:.1f}"] for c in cost]),
                "", "Cross-encoder seconds only (the hybrid retrieval before it is not included), over the "
                "answerable and out-of-domain queries together.", ""]
    out += ["## Paired comparisons", "",
            "Wins:losses of A over B on discordant queries, exact two-sided sign test; * p < 0.05. RR: queries "
            "where A's reciprocal rank is higher : lower. Chars: queries where A reaches the needle in fewer "
            "characters : more (a miss counts as infinitely many).", "",
            _table(paired_head(st), paired_rows(report)), ""]
    if report.get("answers"):
        out += answers_markdown(report["answers"])
    base = report.get("baseline")
    if base:
        out += ["## Against the baseline", "", f"Baseline `{base['path']}`: "
                + ("passed" if base["passed"] else "FAILED: " + "; ".join(base["failures"])), ""]
        out += [_table(["configuration", *[f"R@{k}" for k in st["recall_ks"]], "budget", "newly destroyed"],
                       [[c["configuration"], *[_p(t) for t in c["tests"]],
                         f"B@{c['budget']['budget']} {_p(c['budget'])}" if c.get("budget") else "-",
                         ", ".join(c["newly_destroyed"]) or "-"] for c in base["comparisons"]]), ""]
        out += [f"Note: {n}" for n in base["notes"]]
    return "\n".join(out) + "\n"
