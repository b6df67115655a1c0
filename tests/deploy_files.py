"""The error budget's files under deploy/ and the metric names their PromQL reads. A plain module (not conftest),
shared by tests/ops (the files themselves) and tests/service/test_metrics.py (the names against a live scrape)."""

from __future__ import annotations

import json
import re

import yaml

from corpus_paths import ROOT

DEPLOY = ROOT / "deploy"
SLO = DEPLOY / "slo.yaml"
RULES = DEPLOY / "prometheus" / "citerag-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "citerag-dashboard.json"

_FUNCTIONS_AND_KEYWORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values", "group",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile", "vector", "scalar", "abs",
    "clamp_min", "clamp_max", "absent", "label_replace", "time", "by", "without", "and", "or", "unless", "on",
    "ignoring", "group_left", "group_right", "bool", "offset", "inf", "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric (and recording rule) names a PromQL expression reads: identifiers left after removing strings,
    label matchers, range selectors, grouping lists, function calls and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()", text):
        if match.group(1).lower() not in _FUNCTIONS_AND_KEYWORDS:
            names.add(match.group(1))
    return names


def rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return [r["expr"] for g in groups for r in g["rules"]]


def recorded_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {r["record"] for g in groups for r in g["rules"] if "record" in r}


def dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]
