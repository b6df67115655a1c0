"""Issue 25, hole 6: GET /metrics names no collection to someone the API would not show it to. Without a metrics
token it is open, so it carries aggregates only (documents by status over every collection, no collection label);
with the token, whoever holds it (the operator's Prometheus) gets them per collection."""

from __future__ import annotations

from pathlib import Path

from live import live_server, wait_settled
from prometheus_client.parser import text_string_to_metric_families

from citerag.service.state import ServiceConfig

TOKEN = "metrics-token-for-security-tests"
BROKEN = b"%PDF-1.4 this is not a PDF"  # fails at once: no model is loaded to count a document


def _documents(text: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "citerag_documents"]


def test_open_metrics_carry_no_collection_names_and_the_token_unlocks_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with live_server(home, ServiceConfig(keys_required=False)) as server, server.client() as c:
        assert c.post("/v1/collections", json={"name": "alpha-secret-team"}).status_code == 201
        for collection, names in (("alpha-secret-team", ["a.pdf", "b.pdf"]), ("default", ["c.pdf"])):
            files = [("files", (name, BROKEN)) for name in names]
            uploaded = c.post(f"/v1/collections/{collection}/documents", files=files)
            assert uploaded.status_code == 202, uploaded.text
            wait_settled(c, collection, [d["id"] for d in uploaded.json()["documents"]], timeout=120)
        response = c.get("/metrics")
        assert response.status_code == 200
        assert "alpha-secret-team" not in response.text and 'collection="' not in response.text
        documents = _documents(response.text)
        assert sorted(labels["status"] for labels, _ in documents) == ["failed", "indexed", "pending"]
        assert all(set(labels) == {"status"} for labels, _ in documents)
        assert {labels["status"]: value for labels, value in documents} == {"failed": 3, "indexed": 0, "pending": 0}
    with live_server(home, ServiceConfig(keys_required=False, metrics_token=TOKEN)) as server, server.client() as c:
        assert c.get("/metrics").status_code == 401
        response = c.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert response.status_code == 200
        by_collection = {(labels["collection"], labels["status"]): value for labels, value in
                         _documents(response.text) if labels["status"] == "failed"}
        assert by_collection == {("alpha-secret-team", "failed"): 2, ("default", "failed"): 1}
