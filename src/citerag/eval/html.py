"""report.html: self-contained (PNG pictures inline as base64), the tables of report.md."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Callable
from typing import Any

from citerag.eval import plots
from citerag.eval.report import (
    BUDGET_NOTE,
    HEADLINE_HEAD,
    answer_rows,
    budget_head,
    budget_rows,
    headline_rows,
    judge_lines,
    latency_rows,
    paired_head,
    paired_rows,
    primary,
    window_cell,
)

_STYLE = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left}
th{background:#f3f3f3}img{max-width:100%}.fail{color:#b00}.ok{color:#070}details{margin:1em 0}"""


def _img(png: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def to_html(report: dict[str, Any], save: Callable[[str, bytes], None] | None = None) -> str:
    """The page; `save(file_name, png)`, when given, also receives every picture (for a README, say)."""

    def img(png: bytes, name: str, alt: str) -> str:
        if save is not None:
            save(name, png)
        return _img(png, alt)

    gt, st = report["ground_truth"], report["settings"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>citerag evaluation</title>"
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>citerag evaluation</h1><p>{html.escape(report['created'])}: {gt['questions']} answerable queries "
             f"({len(gt['truths'])} truths), {gt['ood']} out-of-domain; Wilson 95% intervals in brackets; "
             f"{report['timing']['total_seconds']:.0f} s.</p>"]
    base = report.get("baseline")
    if base:
        cls, word = ("ok", "passed") if base["passed"] else ("fail", "FAILED")
        parts.append(f"<p class='{cls}'>Gate against {html.escape(base['path'])}: {word}"
                     + "".join(f"<br>{html.escape(f)}" for f in base["failures"]) + "</p>")
    parts += ["<h2>Retrieval</h2>", _table(HEADLINE_HEAD, headline_rows(report)),
              "<h2>Recall at a context budget</h2>", _table(budget_head(report), budget_rows(report)),
              f"<p>{html.escape(BUDGET_NOTE)}</p>",
              "<h2>Recall@k</h2>", img(plots.recall_curves(report), "recall.png", "Recall@k curves")]
    parts.append("<h2>Threshold calibration</h2>")
    shown = [primary(report)]
    for c in report["configurations"]:  # one picture per other embedder too: thresholds are per model
        if c["retriever"] == "dense" and c["strategy"] == shown[0]["strategy"] and all(
                c["embedder"] != s["embedder"] for s in shown):
            shown.append(c)
    for conf in shown:
        cal = conf["calibration"]
        if not cal["in_domain_best"] or not cal["ood_best"]:
            continue
        rec, ref = cal["recommended"], cal["at_reference"]
        parts.append(f"<h3>{html.escape(conf['id'])}</h3><p>Worst in-domain best-hit distance "
                     f"{cal['worst_in_domain']:.3f}; best out-of-domain {cal['best_ood']:.3f}. Recommended threshold "
                     f"{rec['threshold']:.3f} (bluff:refusal cost {cal['cost_ratio']:g}:1): {rec['refused']} of "
                     f"{conf['queries']} answerable refused, {rec['bluffs']} of {gt['ood']} out-of-domain answered. "
                     f"At {st['reference_threshold']}: {ref['refused']} refused, {ref['bluffs']} bluffs.</p>")
        tag = re.sub(r"[^A-Za-z0-9.-]+", "_", conf["id"])
        parts.append(img(plots.distance_histograms(conf, st["reference_threshold"]), f"distances-{tag}.png",
                         "distance histograms"))
        parts.append(img(plots.sweep_curve(conf, conf["queries"], gt["ood"]), f"sweep-{tag}.png", "threshold sweep"))
    cost = [c for c in report["configurations"] if c.get("rerank_latency")]
    if cost:
        parts.append("<h2>Rerank cost per query</h2>")
        parts.append(_table(["configuration", "queries", "p50 ms", "p95 ms"],
                            [[c["id"], str(c["rerank_latency"]["n"]), f"{c['rerank_latency']['p50_ms']:.1f}",
                              f"{c['rerank_latency']['p95_ms']:.1f}"] for c in cost]))
    answers = report.get("answers")
    if answers:
        parts.append(f"<h2>Answers</h2><p>{html.escape(answers['configuration'])} through the answer pipeline, "
                     f"generator {html.escape(answers['generator'])}, threshold {answers['threshold']:g}.</p>")
        parts.append(_table(["figure", "count", "value [95%]"], answer_rows(answers)))
        parts.extend(f"<p>{html.escape(line)}</p>" for line in judge_lines(answers))
        parts.append(_table(["stage", "queries", "p50 ms", "p95 ms", "p99 ms"], latency_rows(answers)))
    parts.append("<h2>Indexes</h2>")
    parts.append(_table(["embedder", "strategy", "docs", "chunks", "over window", "header tokens", "seconds"],
                        [[i["embedder"], i["strategy"], str(i["documents"]), str(i["chunks"]),
                          window_cell(i), f"{i['header_share']:.1%}",
                          f"{i['seconds']:.1f}"] for i in report["indexes"]]))
    rows = paired_rows(report)
    parts.append(f"<details><summary>Paired comparisons ({len(rows)} pairs; wins:losses of A over B, exact "
                 "sign test, * p &lt; 0.05)</summary>" + _table(paired_head(st), rows) + "</details>")
    parts.append("</body></html>")
    return "\n".join(parts)
