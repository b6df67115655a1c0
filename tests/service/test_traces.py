"""GET /v1/traces/{id}: the trace of a question (its X-Trace-Id, the server's own even when the client sent a
traceparent) for a key that sees its collection, and a 404 for another collection's key, as on every route."""

from __future__ import annotations

import pytest
from service_fixtures import Deployment

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
# Asked by no other test, so that no cache level answers it and every stage runs.
QUESTION = "Which program lets a sysadmin hand out limited root privileges and keep a log of root activity?"


def test_a_question_trace_is_served_to_its_collection_only(deployment: Deployment) -> None:
    server = deployment.server
    with server.client(deployment.reader_a) as c:
        asked = c.post("/v1/collections/default/ask", json={"question": QUESTION},
                       headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"})
        assert asked.status_code == 200, asked.text
        # The request's trace is the server's (the client's traceparent is only named), with the question's spans.
        asked_id = asked.headers["X-Trace-Id"]
        assert asked_id == asked.json()["trace_id"] and asked_id != TRACE
        assert c.get(f"/v1/traces/{TRACE}").status_code == 404
        trace = c.get(f"/v1/traces/{asked_id}")
        assert trace.status_code == 200, trace.text
        record = trace.json()
        assert record["collection"] == "default" and record["operation"] == "ask"
        assert record["text_kept"] is False and "question" not in record
        names = [s["name"] for s in record["spans"]]
        assert {"citerag.ask", "citerag.embed_query", "citerag.retrieve", "citerag.gate",
                "citerag.generate", "citerag.check"} <= set(names)
        gate = next(s for s in record["spans"] if s["name"] == "citerag.gate")["attributes"]
        assert gate["citerag.gate.decision"] == "answered" and gate["citerag.hits.chunk_ids"]
        # A search without a traceparent gets a trace of its own, also served.
        searched = c.post("/v1/collections/default/search", json={"query": "sudo root activity log"})
        own = searched.headers["X-Trace-Id"]
        assert len(own) == 32 and own not in (TRACE, asked_id)
        assert c.get(f"/v1/traces/{own}").json()["operation"] == "search"
        assert c.get(f"/v1/traces/{'0' * 32}").status_code == 404
        assert c.get("/v1/traces/not-a-trace").status_code == 422
    with server.client(deployment.team_b) as c:
        hidden = c.get(f"/v1/traces/{asked_id}")
        assert hidden.status_code == 404 and hidden.json() == {"error": f"trace {asked_id} not found",
                                                              "field": None}
    with server.client(deployment.admin) as c:
        assert c.get(f"/v1/traces/{asked_id}").status_code == 200
    with server.client() as c:
        assert c.get(f"/v1/traces/{asked_id}").status_code == 401


@pytest.mark.parametrize("header", ["", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"])
def test_without_a_valid_traceparent_a_new_trace_is_started(deployment: Deployment, header: str) -> None:
    with deployment.server.client() as c:
        response = c.get("/v1/collections", headers={"traceparent": header} if header else {})
        assert response.status_code == 401 and len(response.headers["X-Trace-Id"]) == 32
        assert response.headers["X-Trace-Id"] != "0" * 32
