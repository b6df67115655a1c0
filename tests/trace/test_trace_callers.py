"""A caller's `traceparent` never chooses a trace id (issue 25, hole 3): each request starts a trace of the
server's own, linked to the caller's span (an OpenTelemetry Link, what an OTLP collector joins on) and naming it in
attributes that the kept record carries; a kept trace is never overwritten by a later request naming its id."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citerag.app.home import Citerag
from citerag.trace.setup import request_span
from citerag.trace.store import root_span

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def _headers(trace_id: str = CALLER_TRACE, span_id: str = CALLER_SPAN) -> dict[str, str]:
    return {"traceparent": f"00-{trace_id}-{span_id}-01", "baggage": "user=mallory"}


def _request(exported: InMemorySpanExporter, trace_id: str) -> ReadableSpan:
    [span] = [s for s in exported.get_finished_spans()
              if s.kind == trace.SpanKind.SERVER and s.context and format(s.context.trace_id, "032x") == trace_id]
    return span


def test_a_traceparent_is_linked_never_continued(notes_app: Citerag, exported: InMemorySpanExporter) -> None:
    with request_span("POST", "/v1/collections/default/search", _headers()) as trace_id:
        result = notes_app.search("ferry pier")
    assert trace_id is not None and len(trace_id) == 32 and trace_id != CALLER_TRACE
    assert result.trace_id == trace_id  # the operation is the request's, in the server's trace
    span = _request(exported, trace_id)
    assert span.parent is None  # a root: the caller's span is not its parent
    [link] = span.links
    assert format(link.context.trace_id, "032x") == CALLER_TRACE and format(link.context.span_id, "016x") == CALLER_SPAN
    attributes = dict(span.attributes or {})
    assert attributes["citerag.caller.trace_id"] == CALLER_TRACE
    assert attributes["citerag.caller.span_id"] == CALLER_SPAN
    # The kept record names the caller too: an operator can find the trace a client's request belonged to.
    record = notes_app.collection().trace(trace_id)
    assert record is not None
    root = root_span(record)["attributes"]
    assert root["citerag.caller.trace_id"] == CALLER_TRACE and root["citerag.caller.span_id"] == CALLER_SPAN


def test_the_same_traceparent_twice_makes_two_traces(notes_app: Citerag, exported: InMemorySpanExporter) -> None:
    ids = []
    for _ in range(2):
        with request_span("POST", "/search", _headers()) as trace_id:
            ids.append(trace_id)
    assert None not in ids and len(set(ids)) == 2 and CALLER_TRACE not in ids


def test_a_kept_trace_is_not_overwritten_by_a_request_naming_it(notes_app: Citerag,
                                                                exported: InMemorySpanExporter) -> None:
    searched = notes_app.search("ferry pier")
    assert searched.trace_id is not None
    before = notes_app.collection().trace(searched.trace_id)
    with request_span("POST", "/ask", _headers(searched.trace_id)) as trace_id:
        answer = notes_app.ask("Where does the ferry leave from?")
    assert trace_id != searched.trace_id and answer.trace_id == trace_id
    assert notes_app.collection().trace(searched.trace_id) == before  # still the search, untouched
    asked = notes_app.collection().trace(answer.trace_id)  # type: ignore[arg-type]
    assert asked is not None and asked["operation"] == "ask"
    assert root_span(asked)["attributes"]["citerag.caller.trace_id"] == searched.trace_id


def test_without_a_valid_traceparent_nothing_is_linked(exported: InMemorySpanExporter) -> None:
    for headers in ({}, {"traceparent": "garbage"}, {"traceparent": f"00-{'0' * 32}-{CALLER_SPAN}-01"}):
        with request_span("GET", "/healthz", headers) as trace_id:
            pass
        assert trace_id is not None and trace_id != "0" * 32
        span = _request(exported, trace_id)
        assert span.parent is None and not span.links
        assert "citerag.caller.trace_id" not in (span.attributes or {})
