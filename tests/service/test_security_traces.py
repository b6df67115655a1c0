"""A client's `traceparent` never chooses a trace id (issue 25, hole 3). Sent with the id of a kept trace, an ask
once overwrote it (a search of 7 spans became an ask of 16), and a request on another collection got that id back
as its X-Trace-Id and read its own record under it. Now every request's trace id is the server's: the kept trace
stays as it was, the caller's span is named in the new trace's record, and another collection still gets a 404."""

from __future__ import annotations

import re
from typing import Any

from service_fixtures import Deployment

CALLER_SPAN = "00f067aa0ba902b7"
# Asked by no other test, so that each one is a fresh trace of every stage.
QUESTION = "Which tool keeps a log of what a sysadmin did as root, command by command?"
OTHER_QUESTION = "How does a user keep a log of a terminal session?"


def _caller(record: dict[str, Any]) -> tuple[str | None, str | None]:
    root = next(s for s in record["spans"] if s["attributes"].get("citerag.operation"))["attributes"]
    return root.get("citerag.caller.trace_id"), root.get("citerag.caller.span_id")


def test_a_traceparent_naming_a_kept_trace_neither_overwrites_nor_shares_it(deployment: Deployment) -> None:
    server = deployment.server
    with server.client(deployment.reader_a) as c:
        searched = c.post("/v1/collections/default/search", json={"query": "sudo root activity log"})
        kept = searched.headers["X-Trace-Id"]
        before = c.get(f"/v1/traces/{kept}").json()
        assert before["operation"] == "search"
        header = {"traceparent": f"00-{kept}-{CALLER_SPAN}-01"}
        for stream in (False, True):
            asked = c.post("/v1/collections/default/ask", json={"question": QUESTION, "stream": stream},
                           headers=header)
            assert asked.status_code == 200, asked.text
            assert c.get(f"/v1/traces/{kept}").json() == before  # the search's record, untouched
            own = asked.headers["X-Trace-Id"]
            assert re.fullmatch(r"[0-9a-f]{32}", own) and own != kept
            record = c.get(f"/v1/traces/{own}").json()
            assert record["operation"] == "ask" and record["trace_id"] == own
            assert _caller(record) == (kept, CALLER_SPAN)  # the caller's span, named for an operator
            if not stream:
                assert asked.json()["trace_id"] == own
    # Another collection's key, the same header: a trace of its own, and the kept one is still not its to read.
    with server.client(deployment.team_b) as c:
        other = c.post("/v1/collections/other/ask", json={"question": OTHER_QUESTION}, headers=header)
        assert other.status_code == 200, other.text
        theirs = other.headers["X-Trace-Id"]
        assert theirs != kept and other.json()["trace_id"] == theirs
        assert c.get(f"/v1/traces/{kept}").status_code == 404
        record = c.get(f"/v1/traces/{theirs}").json()
        assert record["collection"] == "other" and _caller(record) == (kept, CALLER_SPAN)


def test_the_same_traceparent_never_gives_two_requests_one_trace(deployment: Deployment) -> None:
    header = {"traceparent": f"00-4bf92f3577b34da6a3ce929d0e0e4736-{CALLER_SPAN}-01"}
    with deployment.server.client() as c:
        ids = {c.get("/healthz", headers=header).headers["X-Trace-Id"] for _ in range(3)}
    assert len(ids) == 3 and "4bf92f3577b34da6a3ce929d0e0e4736" not in ids
