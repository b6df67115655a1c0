"""Tracing set-up: one OpenTelemetry tracer provider per process, the collector that hands each finished
operation's spans to its collection's trace store, and the OTLP/HTTP exporter when one is configured.

Spans carry ids, ranks, distances, counts and decisions, never a question's or an answer's text: what leaves
the process (OTLP) or lands in the trace store is free of user text unless a collection allows it, and then
the text is kept in the store's row (see citerag.trace.store), never as a span attribute.

    with tracer.start_as_current_span("citerag.gate") as span:  # a stage
        span.set_attributes({...})

An operation (a search, a question, one indexed document) is a span with the attribute `citerag.operation`;
when it ends, the Collector gives its trace's spans to the sink set for the running code (`sink(...)`).
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from citerag.errors import CiteragError, first_line

log = logging.getLogger("citerag")
tracer = trace.get_tracer("citerag")  # a proxy until a provider is set: stages need no set-up to run
OPERATION = "citerag.operation"
# The span a request's caller sent in its `traceparent` (see request_span): kept in the request's context, so that
# each operation it runs names the caller in its attributes.
_CALLER = otel_context.create_key("citerag.caller")

# Receives the spans of one finished operation (its root last).
Sink = Callable[[Sequence[ReadableSpan]], None]
_sink: ContextVar[Sink | None] = ContextVar("citerag_trace_sink", default=None)


class TraceExists(CiteragError):
    """A trace store already keeps a trace under this id: kept traces are never overwritten."""


class Collector(SpanProcessor):
    """Keeps finished spans by trace until their operation ends, then hands them to the current sink.

    At most `max_traces` unfinished traces are kept (the oldest go first): a request that ran no operation
    leaves its span here until it is pushed out."""

    def __init__(self, max_traces: int = 1000) -> None:
        self._spans: OrderedDict[int, list[ReadableSpan]] = OrderedDict()
        self._lock = threading.Lock()
        self.max_traces = max_traces

    def on_end(self, span: ReadableSpan) -> None:
        ctx = span.context
        if ctx is None:
            return
        with self._lock:
            spans = self._spans.setdefault(ctx.trace_id, [])
            spans.append(span)
            while len(self._spans) > self.max_traces:
                self._spans.popitem(last=False)
            # Only an operation's end releases its trace: a request's own span may end before the operation
            # it started (a streamed answer), so traces without one are left to the bound above.
            is_operation = (span.attributes or {}).get(OPERATION) is not None
            if is_operation:
                self._spans.pop(ctx.trace_id, None)
        write = _sink.get()
        if is_operation and write is not None:
            try:
                write(spans)
            except TraceExists as exc:  # not a fault of the store: a second operation in one trace
                log.warning("trace %s not kept: %s", trace_id_hex(ctx.trace_id), exc)
            except Exception as exc:  # a trace that cannot be kept must never fail the query it describes
                # The cause in the line itself: the CLI shows a warning's message only (a full or read-only disk).
                log.warning("trace %s not kept (%s)", trace_id_hex(ctx.trace_id), first_line(exc), exc_info=True)

    def shutdown(self) -> None:
        with self._lock:
            self._spans.clear()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_collector = Collector()
_exporting: set[str] = set()
_setup_lock = threading.Lock()
_installed = False


def provider() -> TracerProvider | None:
    """The process's SDK tracer provider, set as the global one on first use unless the host application set
    its own SDK provider (then citerag adds its collector to that one). None when the global provider is some
    other implementation, which citerag cannot add to (traces then go only where that provider sends them)."""
    global _installed
    with _setup_lock:
        current = trace.get_tracer_provider()
        if not isinstance(current, TracerProvider):
            trace.set_tracer_provider(TracerProvider())
            current = trace.get_tracer_provider()
        if not isinstance(current, TracerProvider):
            return None
        if not _installed:
            current.add_span_processor(_collector)
            _installed = True
        return current


def configure(otlp_endpoint: str = "") -> None:
    """Tracing on for this process; spans also exported over OTLP/HTTP to `otlp_endpoint` when it is set (once
    per endpoint: export is process-wide, whichever collection's settings name the collector)."""
    sdk = provider()
    if not otlp_endpoint or sdk is None:
        return
    with _setup_lock:
        if otlp_endpoint in _exporting:
            return
        _exporting.add(otlp_endpoint)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    sdk.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(otlp_endpoint))))


def traces_url(endpoint: str) -> str:
    """An OTLP/HTTP collector's traces URL: http://HOST:4318 means http://HOST:4318/v1/traces."""
    parts = urlsplit(endpoint)
    return endpoint if parts.path not in ("", "/") else endpoint.rstrip("/") + "/v1/traces"


@contextmanager
def sink(write: Sink | None) -> Iterator[None]:
    """Operations that end inside this block are handed to `write`."""
    token = _sink.set(write)
    try:
        yield
    finally:
        _sink.reset(token)


@contextmanager
def detached() -> Iterator[None]:
    """Spans started inside begin traces of their own (each document a sync indexes inside an HTTP request is its
    own operation, kept as its own trace, not a child of the request's)."""
    token = otel_context.attach(otel_context.Context())
    try:
        yield
    finally:
        otel_context.detach(token)


def traced_events(span: trace.Span, events: Iterator[Any], write: Sink | None) -> Iterator[Any]:
    """Run a generator of events with `span` current while it computes each one, and end the span when it ends.

    Every step runs in one Context of the stream's own, copied here: a streamed answer is resumed from a thread
    pool (each step in a fresh copy of the caller's Context) and closed from yet another when its client leaves,
    while a stage may attach its span in one step and detach it in the next (a span around a yield), which only
    works when both are the same Context. A stream closed before its end is marked `citerag.abandoned`."""
    context = contextvars.copy_context()
    context.run(otel_context.attach, trace.set_span_in_context(span))  # never detached: the Context is discarded
    return _steps(context, span, events, write)


def _steps(context: contextvars.Context, span: trace.Span, events: Iterator[Any], write: Sink | None
           ) -> Iterator[Any]:
    try:
        while True:
            try:
                event = context.run(next, events)
            except StopIteration:
                return
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
                raise
            try:
                yield event
            except GeneratorExit:  # the consumer left early (a client hung up): expected, not an error
                span.set_attribute("citerag.abandoned", True)
                log.debug("stream of trace %s abandoned", current_trace_id(span))
                raise
    finally:
        try:
            close = getattr(events, "close", None)  # runs the generator's cleanup (a model call stops) now
            if callable(close):
                context.run(close)
        finally:
            end(span, write)


def end(span: trace.Span, write: Sink | None) -> None:
    """End an operation's span, its trace going to `write` (None: to no store)."""
    if write is None:
        span.end()
        return
    with sink(write):
        span.end()


def content_id(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


def trace_id_hex(trace_id: int) -> str:
    return format(trace_id, "032x")


def span_id_hex(span_id: int) -> str:
    return format(span_id, "016x")


def current_trace_id(span: trace.Span) -> str | None:
    ctx = span.get_span_context()
    return trace_id_hex(ctx.trace_id) if ctx.is_valid else None


def hit_attributes(prefix: str, hits: Sequence[Any]) -> dict[str, Any]:
    """What a stage returned, as list attributes: chunk ids, document ids, ranks and cosine distances, and a
    digest of each chunk's content (the same passage keeps it when its document is replaced and the chunk
    gets a new id: what replay matches on; a digest of 512 characters of a document is not its text)."""
    return {f"{prefix}.count": len(hits),
            f"{prefix}.content_ids": [content_id(h.chunk.content) for h in hits],
            f"{prefix}.chunk_ids": [int(h.chunk.id) for h in hits],
            f"{prefix}.document_ids": [int(h.document.id) for h in hits],
            f"{prefix}.ranks": [int(h.rank) for h in hits],
            f"{prefix}.distances": [round(float(h.cosine_distance), 6) for h in hits]}


def request_attributes(followup: Any, options: Any) -> dict[str, Any]:
    """A question's context on its span: a conversation's turn (citerag.app.models.Followup, or None), how its query
    was made, never its words; the experiment arm its options came from (AskOptions.experiment and .arm)."""
    found: dict[str, Any] = {}
    if followup is not None:
        found |= {"citerag.followup.rewrite": followup.rewrite, "citerag.followup.earlier_turns": followup.earlier}
        found |= {"citerag.conversation": followup.conversation_id} if followup.conversation_id else {}
    if getattr(options, "arm", None):
        found |= {"citerag.experiment": options.experiment, "citerag.arm": options.arm}
    return found


def caller_attributes() -> dict[str, str]:
    """The attributes naming the span a request's caller sent (its `traceparent`), {} when none came: what an
    operation records so that an operator can find the caller's trace from a kept one."""
    caller = otel_context.get_value(_CALLER)
    if not isinstance(caller, trace.SpanContext):
        return {}
    return {"citerag.caller.trace_id": trace_id_hex(caller.trace_id),
            "citerag.caller.span_id": span_id_hex(caller.span_id)}


@contextmanager
def request_span(method: str, path: str, headers: Any) -> Iterator[str | None]:
    """An HTTP request's span, the root of a new trace; yields its trace id (None when the request is not traced).
    The operations the request runs become its children, in its trace.

    A W3C `traceparent` that came in never chooses the trace id (a client could then name another request's kept
    trace, or another collection's): the caller's span is linked (the OpenTelemetry way to relate traces, what an
    OTLP collector joins on) and named in attributes (caller_attributes), never made the parent. A span current
    around the request (a host application's own instrumentation, itself continuing the header) is linked too."""
    from opentelemetry.propagate import extract

    incoming = trace.get_current_span(extract(dict(headers.items()))).get_span_context()
    ambient = trace.get_current_span().get_span_context()
    callers = [c for c in (incoming, ambient) if c.is_valid]
    links = [trace.Link(c) for i, c in enumerate(callers) if c not in callers[:i]]
    context = otel_context.Context()  # no parent, no baggage: nothing of the client's shapes the trace
    if incoming.is_valid:
        context = otel_context.set_value(_CALLER, incoming, context)
    token = otel_context.attach(context)  # current, not only the parent: the operations read the caller from it
    try:
        with tracer.start_as_current_span(f"{method} {path}", kind=trace.SpanKind.SERVER, links=links,
                                          attributes=caller_attributes()) as span:
            yield current_trace_id(span)
    finally:
        otel_context.detach(token)
