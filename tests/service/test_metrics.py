"""GET /metrics of a real server: stage histograms, answers vs refusals, cache hits, documents by status, ingest
outcomes, the token; every metric the dashboard and the rules read is one this scrape exports; and a real Prometheus
on loopback scrapes the server with the generated rules and computes a recording rule from it."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from live import LiveServer, live_server, wait_settled
from prometheus_client.parser import text_string_to_metric_families

from citerag.app import experiments, sources
from citerag.service.state import ServiceConfig
from citerag.types import SourceInfo
from corpus_paths import DEV_CORPUS
from deploy_files import RULES, dashboard_exprs, metric_names, recorded_names, rule_exprs
from system_tools import require_prometheus

TOKEN = "metrics-token-for-tests"
ASK = "/v1/collections/default/ask"
QUESTION = "What is sudo(8) intended for in system administration?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One chapter indexed and one file that fails, on a server without API keys and with a metrics token."""
    config = ServiceConfig(keys_required=False, metrics_token=TOKEN)
    with live_server(tmp_path_factory.mktemp("metrics-home"), config) as live, live.client() as c:
        files = [("files", ("ch04.en.html", (DEV_CORPUS / "ch04.en.html").read_bytes())),
                 ("files", ("broken.pdf", b"%PDF-1.4 this is not a PDF"))]
        response = c.post("/v1/collections/default/documents", files=files)
        assert response.status_code == 202, response.text
        wait_settled(c, "default", [d["id"] for d in response.json()["documents"]], timeout=120)
        yield live


def ask(c: httpx.Client, *, refuse: bool = False, stream: bool = False) -> None:
    # threshold: a cosine distance no hit is under (refused) or one every hit is under (answered).
    response = c.post(ASK, json={"question": QUESTION, "threshold": 1e-6 if refuse else 2.0, "stream": stream})
    assert response.status_code == 200, response.text


def scrape(server: LiveServer) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of one authorised scrape."""
    with server.client() as c:
        response = c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(response.text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    return samples


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for have, v in samples.get(name, []) if all(have.get(k) == w for k, w in labels.items()))


def test_metrics_show_stages_answers_refusals_caches_documents_and_ingest(server: LiveServer) -> None:
    before = scrape(server)
    with server.client() as c:
        ask(c)
        ask(c)  # the same question again: an answer-cache hit
        ask(c, refuse=True)
        ask(c, stream=True)
        assert c.post("/v1/collections/default/search", json={"query": "sudo"}).status_code == 200
        assert c.post(ASK, json={"question": ""}).status_code == 422
    after = scrape(server)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("citerag_answers_total", outcome="answered") == 3
    assert grew("citerag_answers_total", outcome="refused") == 1
    for stage in ("embed", "retrieve", "total"):
        assert grew("citerag_stage_duration_seconds_count", operation="ask", stage=stage) >= 1, stage
    assert grew("citerag_stage_duration_seconds_count", operation="ask", stage="generate") >= 1
    assert grew("citerag_stage_duration_seconds_count", operation="search", stage="retrieve") == 1
    assert value(after, "citerag_stage_duration_seconds_bucket", operation="ask", stage="total", le="+Inf") \
        == value(after, "citerag_stage_duration_seconds_count", operation="ask", stage="total")
    assert grew("citerag_cache_requests_total", level="answer", result="hit") >= 1
    assert value(after, "citerag_cache_requests_total", level="query", result="miss") >= 1
    route = "/v1/collections/{name}/ask"
    assert grew("citerag_http_request_duration_seconds_count", route=route, method="POST", status="2xx") == 4
    assert grew("citerag_http_request_duration_seconds_count", route=route, method="POST", status="4xx") == 1
    assert not any("/default/" in labels.get("route", "") for labels, _ in
                   after["citerag_http_request_duration_seconds_count"]), "a path, not its template, as a label"
    assert value(after, "citerag_documents", collection="default", status="indexed") == 1
    assert value(after, "citerag_documents", collection="default", status="failed") == 1
    assert value(after, "citerag_documents", collection="default", status="pending") == 0
    assert value(after, "citerag_ingest_documents_total", outcome="indexed") == 1
    assert value(after, "citerag_ingest_documents_total", outcome="failed") == 1
    assert value(after, "citerag_ingest_chunks_total") > 10
    assert value(after, "citerag_ingest_queue_depth") == 0
    assert grew("citerag_answers_checked_total") >= 1
    assert QUESTION not in str(after), "no question text in the metrics"


def test_feedback_is_counted_per_collection_arm_and_verdict(server: LiveServer) -> None:
    before = scrape(server)
    with server.client() as c:
        answered = c.post(ASK, json={"question": QUESTION, "threshold": 2.0}).json()
        for helpful in (True, False, False):
            path = f"/v1/collections/default/answers/{answered['trace_id']}/feedback"
            assert c.post(path, json={"helpful": helpful}).status_code == 200
        assert c.post("/v1/collections/default/answers/" + "0" * 32 + "/feedback",
                      json={"helpful": True}).status_code == 404  # nothing kept: not counted
    after = scrape(server)
    for verdict, grown in (("helpful", 1), ("unhelpful", 2)):
        labels = {"collection": "default", "arm": "default", "verdict": verdict}
        assert value(after, "citerag_feedback_total", **labels) - value(before, "citerag_feedback_total", **labels) \
            == grown, verdict


def test_the_metrics_token_is_required_when_configured(server: LiveServer) -> None:
    with server.client() as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        assert c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        assert "/metrics" not in c.get("/openapi.json").json()["paths"]


def test_without_a_token_the_metrics_are_open(tmp_path: Path) -> None:
    with live_server(tmp_path / "home", ServiceConfig(keys_required=False)) as live, live.client() as c:
        response = c.get("/metrics")
        assert response.status_code == 200
        assert "citerag_answers_total" in response.text


def test_every_metric_the_dashboard_and_rules_read_is_exported_or_recorded(server: LiveServer, tmp_path: Path) -> None:
    # A source synced once (an empty folder, every 6 hours): its series are what the stalled-source alert reads.
    collection = server.app.state.service.app.collection()
    if not any(s.name == "metrics-probe" for s in collection.store.sources()):
        sources.add(collection, SourceInfo("metrics-probe", "folder", str(tmp_path), interval_s=21600))
        assert sources.sync(collection, "metrics-probe").complete
    with server.client() as c:
        ask(c)  # so that every labelled series has appeared, whichever test ran first
        # An experiment's series appear once it has answered (its arms' rows on the dashboard).
        collection = server.app.state.service.app.collection()
        experiments.start(collection, "metrics-probe", {"k": 5})
        try:
            answered = c.post(ASK, json={"question": QUESTION, "threshold": 2.0}).json()
            assert answered["experiment"] == "metrics-probe" and answered["arm"] in ("a", "b")
        finally:
            experiments.stop(collection)
    exported = set(scrape(server)) | recorded_names()
    for expr in rule_exprs() + dashboard_exprs():
        missing = metric_names(expr) - exported
        assert not missing, f"{expr!r} reads {sorted(missing)}, which the server does not export"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_real_prometheus_computes_the_recording_rules_from_a_scrape(server: LiveServer, tmp_path: Path) -> None:
    require_prometheus()
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "citerag", "metrics_path": "/metrics",
                            "authorization": {"type": "Bearer", "credentials": TOKEN},
                            "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        ["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)

    def query(expr: str) -> float | None:
        reply = api.get("/api/v1/query", params={"query": expr})
        if reply.status_code == 503:  # Prometheus still starting ("Service Unavailable"): no value yet
            return None
        result = reply.json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    try:
        deadline = time.monotonic() + 50
        found: dict[str, float] = {}
        with server.client() as c:
            while time.monotonic() < deadline:
                ask(c)
                ask(c, refuse=True)
                time.sleep(0.2)
                try:
                    for rule in ("citerag:ask_requests:rate5m", "citerag:answers_refused:ratio_rate5m",
                                 "citerag:ask_errors:ratio_rate5m"):
                        got = query(rule)
                        if got is not None and got == got and (rule != "citerag:ask_requests:rate5m" or got > 0):
                            found[rule] = got
                except httpx.TransportError:
                    continue  # not listening yet
                if len(found) == 3:
                    break
        assert len(found) == 3, f"after 50 s Prometheus had only {found}; its log:\n" \
                                + (tmp_path / "prometheus.log").read_text()[-3000:]
        assert 0 < found["citerag:ask_requests:rate5m"] < 1000
        assert 0 < found["citerag:answers_refused:ratio_rate5m"] < 1  # every other ask is refused
        assert found["citerag:ask_errors:ratio_rate5m"] == 0  # no 5xx: a ratio of 0, not an empty result
        assert query('up{job="citerag"}') == 1
    finally:
        api.close()
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
