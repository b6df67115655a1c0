"""Feedback on answers over HTTP on the real server, on both backends: kept with the answer's trace (read back in
GET /v1/traces), a source named by its [n], bad fields a 422 naming them, and an answer a key may not see (another
team's, a search, an unknown id) a 404; the metrics count it per collection, arm and verdict."""

from __future__ import annotations

from typing import Any

import pytest
from service_fixtures import Deployment

QUESTION = "How can someone reset the root password if they have physical access to the disk?"
BACKENDS = ["deployment", "pg_deployment"]


def _deployment(request: pytest.FixtureRequest, name: str) -> Deployment:
    found: Deployment = request.getfixturevalue(name)
    return found


def feedback_path(trace_id: str, collection: str = "default") -> str:
    return f"/v1/collections/{collection}/answers/{trace_id}/feedback"


@pytest.mark.parametrize("backend", BACKENDS)
def test_feedback_is_kept_with_the_answers_trace(request: pytest.FixtureRequest, backend: str) -> None:
    d = _deployment(request, backend)
    with d.server.client(d.reader_a) as c:  # a reader asks, and may say what it thought of the answer
        answer = c.post("/v1/collections/default/ask", json={"question": QUESTION}).json()
        trace_id = answer["trace_id"]
        assert not answer["refused"] and len(answer["citations"]) >= 2, answer
        first = c.post(feedback_path(trace_id), json={"helpful": False, "source": 2, "comment": "the second one"})
        assert first.status_code == 200, first.text
        kept = first.json()
        assert (kept["helpful"], kept["source"], kept["none_right"], kept["comment"], kept["count"]) == \
            (False, 2, False, "the second one", 1)
        assert kept["trace_id"] == trace_id and kept["by"] == d.reader_a[len("crk_"):].partition("_")[0]
        again = c.post(feedback_path(trace_id.upper()), json={"helpful": True, "none_right": True, "comment": "  "})
        assert again.status_code == 200 and again.json()["count"] == 2 and again.json()["comment"] == ""
    with d.server.client(d.team_a) as c:  # another key of the collection reads it with the trace
        record = c.get(f"/v1/traces/{trace_id}").json()
        assert [(f["helpful"], f["source"], f["none_right"]) for f in record["feedback"]] == \
            [(False, 2, False), (True, None, True)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_feedback_that_does_not_fit_is_refused_and_keeps_nothing(request: pytest.FixtureRequest,
                                                                  backend: str) -> None:
    d = _deployment(request, backend)
    with d.server.client(d.team_a) as c:
        answer = c.post("/v1/collections/default/ask", json={"question": QUESTION}).json()
        trace_id, cited = answer["trace_id"], len(answer["citations"])
        search = c.post("/v1/collections/default/search", json={"query": "root password"})
        bad: list[tuple[dict[str, Any] | str, str]] = [
            ({"helpful": True, "source": cited + 1}, "source"),
            ({"helpful": True, "source": 1, "none_right": True}, "source"),
            ({"helpful": "yes"}, "helpful"),
            ({"source": 1}, "helpful"),
            ({"helpful": True, "source": 0}, "source"),
            ({"helpful": True, "comment": "x" * 2001}, "comment"),
            ('{"helpful": true, "comment": "\\ud800"}', "comment"),  # a lone surrogate, as JSON may carry
            ({"helpful": True, "verdict": "good"}, "verdict"),
        ]
        for body, field in bad:
            response = c.post(feedback_path(trace_id), json=body) if isinstance(body, dict) else \
                c.post(feedback_path(trace_id), content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 422, (body, response.text)
            assert response.json()["field"] == field, (body, response.json())
        missing = [feedback_path("0" * 32), feedback_path(search.headers["X-Trace-Id"])]
        for path in missing:
            response = c.post(path, json={"helpful": True})
            assert response.status_code == 404 and response.json()["error"].startswith("answer "), response.text
        assert "feedback" not in c.get(f"/v1/traces/{trace_id}").json()
        assert c.post(feedback_path("not-a-trace"), json={"helpful": True}).status_code == 422
    with d.server.client(d.team_b) as c:  # another team: neither the collection nor, in its own, the answer
        assert c.post(feedback_path(trace_id), json={"helpful": True}).status_code == 404
        response = c.post(feedback_path(trace_id, "other"), json={"helpful": True})
        assert response.status_code == 404 and response.json()["error"] == f"answer {trace_id} not found"
    with d.server.client(d.team_a) as c:
        assert "feedback" not in c.get(f"/v1/traces/{trace_id}").json()
