"""GET /v1/traces/{id}: the trace of a question (its X-Trace-Id, continuing the client's traceparent) for a key
that sees its collection, and a 404 for another collection's key, as on every route."""

from __future__ import annotations

from pathlib import Path

import pytest
from live import live_server, wait_settled

from citerag.service.keys import KeyStore

NOTES = b"""# Harbor notes

## Lighthouse

The lighthouse keeper on Quillby Island polishes the brass lens every Tuesday at dawn.
"""
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_a_question_trace_is_served_to_its_collection_only(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    admin = keys.create(None, "admin")
    with live_server(tmp_path) as server:
        with server.client(admin) as c:
            assert c.post("/v1/collections", json={"name": "other"}).status_code == 201
        owner, stranger = keys.create("default", "write"), keys.create("other", "admin")
        with server.client(owner) as c:
            response = c.post("/v1/collections/default/documents", files=[("files", ("notes.md", NOTES))])
            assert response.status_code == 202, response.text
            wait_settled(c, "default", [d["id"] for d in response.json()["documents"]])
            asked = c.post("/v1/collections/default/ask", json={"question": "When is the brass lens polished?"},
                           headers={"traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"})
            assert asked.status_code == 200, asked.text
            # The request's trace is the client's, and the question's spans are in it.
            assert asked.headers["X-Trace-Id"] == TRACE == asked.json()["trace_id"]
            trace = c.get(f"/v1/traces/{TRACE}")
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
            searched = c.post("/v1/collections/default/search", json={"query": "lighthouse"})
            own = searched.headers["X-Trace-Id"]
            assert len(own) == 32 and own != TRACE
            assert c.get(f"/v1/traces/{own}").json()["operation"] == "search"
            assert c.get(f"/v1/traces/{'0' * 32}").status_code == 404
            assert c.get("/v1/traces/not-a-trace").status_code == 422
        with server.client(stranger) as c:
            hidden = c.get(f"/v1/traces/{TRACE}")
            assert hidden.status_code == 404 and hidden.json() == {"error": f"trace {TRACE} not found",
                                                                  "field": None}
        with server.client(admin) as c:
            assert c.get(f"/v1/traces/{TRACE}").status_code == 200
        with server.client() as c:
            assert c.get(f"/v1/traces/{TRACE}").status_code == 401


@pytest.mark.parametrize("header", ["", "garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"])
def test_without_a_valid_traceparent_a_new_trace_is_started(tmp_path: Path, header: str) -> None:
    with live_server(tmp_path) as server, server.client() as c:
        response = c.get("/v1/collections", headers={"traceparent": header} if header else {})
        assert response.status_code == 401 and len(response.headers["X-Trace-Id"]) == 32
        assert response.headers["X-Trace-Id"] != "0" * 32
