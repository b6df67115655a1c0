"""The error budget's files under deploy/: the rules are what `citerag slo-rules` makes of deploy/slo.yaml, Prometheus'
own checker accepts them, a bad objectives file is one line naming the field, and every PromQL expression of the
rules and the dashboard parses into metric names (which tests/service/test_metrics.py matches to a live scrape)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from citerag.cli import cli
from citerag.errors import CiteragError
from citerag.service.slo import render
from deploy_files import DASHBOARD, RULES, SLO, dashboard_exprs, metric_names, recorded_names, rule_exprs
from system_tools import require_prometheus


def test_the_committed_rules_are_what_the_objectives_generate() -> None:
    result = CliRunner().invoke(cli, ["slo-rules", str(SLO)])
    assert result.exit_code == 0, result.output
    assert result.output == RULES.read_text(encoding="utf-8"), \
        "regenerate: citerag slo-rules deploy/slo.yaml > deploy/prometheus/citerag-rules.yml"


def test_the_rules_hold_the_workbook_burn_rate_pairs_and_the_objectives() -> None:
    groups = {g["name"]: g["rules"] for g in yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]}
    recorded = {r["record"]: r["expr"] for r in groups["citerag-slo-recording"]}
    for window in ("5m", "30m", "1h", "2h", "6h", "1d", "3d"):
        assert f"citerag:ask_requests:rate{window}" in recorded
        assert f"citerag:ask_errors:ratio_rate{window}" in recorded
    assert "histogram_quantile(0.95" in recorded["citerag:ask_latency_seconds:p95_rate5m"]
    assert 'outcome="refused"' in recorded["citerag:answers_refused:ratio_rate1h"]
    burns = [(r["labels"]["long_window"], r["labels"]["short_window"], r["labels"]["severity"], r["expr"])
             for r in groups["citerag-slo-alerts"] if r["alert"] == "CiteragAnswerErrorBudgetBurn"]
    # 14.4x, 6x and 1x of a 0.5 % budget.
    def pair(long: str, short: str, limit: str) -> str:
        return f"citerag:ask_errors:ratio_rate{long} > {limit} and citerag:ask_errors:ratio_rate{short} > {limit}"

    assert burns == [("1h", "5m", "page", pair("1h", "5m", "0.072")), ("6h", "30m", "page", pair("6h", "30m", "0.03")),
                     ("3d", "6h", "ticket", pair("3d", "6h", "0.005"))]


def test_promtool_accepts_the_rules() -> None:
    require_prometheus()
    result = subprocess.run(["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


@pytest.mark.parametrize(("change", "message"), [
    ({"availability": {"target": 1.5}}, "availability.target"),
    ({"window": "a month"}, "window"),
    ({"burn_rates": [{"long": "5m", "short": "1h", "factor": 14.4, "severity": "page"}]}, "shorter"),
    ({"refusals": {"min_ratio": 0.7, "max_ratio": 0.6}}, "below max_ratio"),
    ({"surprise": 1}, "surprise"),
])
def test_a_bad_objectives_file_is_one_line_naming_the_field(tmp_path: Path, change: dict, message: str) -> None:
    data = {**yaml.safe_load(SLO.read_text(encoding="utf-8")), **change}
    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(CiteragError, match=re.escape(message)) as caught:
        render(path)
    assert "\n" not in str(caught.value)


def test_every_expression_names_metrics() -> None:
    """The extraction the live-scrape test relies on: it finds the names and nothing but names."""
    assert metric_names('sum by (le, stage) (rate(citerag_stage_duration_seconds_bucket{operation="ask"}[5m]))') \
        == {"citerag_stage_duration_seconds_bucket"}
    assert metric_names("citerag:ask_errors:ratio_rate1h > 0.072 and citerag:ask_errors:ratio_rate5m > 0.072") \
        == {"citerag:ask_errors:ratio_rate1h", "citerag:ask_errors:ratio_rate5m"}
    assert metric_names("vector(0.995)") == set()
    for expr in rule_exprs() + dashboard_exprs():
        assert metric_names(expr) or re.fullmatch(r"vector\([\d.]+\)", expr), expr  # the objectives as series


def test_the_dashboard_covers_stages_refusals_caches_ingest_and_the_budget() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    used = set().union(*(metric_names(e) for e in dashboard_exprs()))
    assert {"citerag_stage_duration_seconds_bucket", "citerag_answers_total", "citerag_cache_requests_total",
            "citerag_documents", "citerag_ingest_documents_total", "citerag_ingest_queue_depth",
            "citerag:ask_error_budget:remaining_ratio"} <= used
    assert used & recorded_names()
    exprs = " ".join(dashboard_exprs())
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}, sum by (le, stage)" in exprs


def test_serve_reads_the_metrics_token_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CITERAG_TEST_NO_SUCH_TOKEN", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--metrics-token-env", "CITERAG_TEST_NO_SUCH_TOKEN"])
    assert isinstance(result.exception, CiteragError)
    assert "CITERAG_TEST_NO_SUCH_TOKEN" in str(result.exception)
