"""A streamed answer stepped as a server steps it (issue 25, hole 9): each event computed in another contextvars
Context (anyio runs every `next()` of a sync iterator in a thread pool, each in a fresh copy), and, when its client
leaves, closed from yet another. Nothing logs "Failed to detach context", and an abandoned stream's trace is still
kept, marked abandoned."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from citerag.app.home import Citerag
from citerag.app.models import AskOptions
from citerag.trace.store import root_span

QUESTION = "Where does the ferry to Quillby Island leave from?"


def _step(events: Iterator[Any]) -> Any:
    return contextvars.copy_context().run(next, events, None)


def _problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{r.name} {r.levelname} {r.getMessage()}" for r in caplog.records
            if r.levelno >= logging.WARNING or r.exc_info or "detach" in r.getMessage()]


def test_a_stream_stepped_in_many_contexts_detaches_cleanly(notes_app: Citerag, exported: InMemorySpanExporter,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    events = notes_app.collection().ask_events(QUESTION, AskOptions(threshold=2.0))
    kinds = []
    while (event := _step(events)) is not None:
        kinds.append(event[0])
    assert kinds[0] == "retrieval" and kinds[-1] == "answer" and "delta" in kinds
    assert _problems(caplog) == []


@pytest.mark.parametrize("left_after", ["retrieval", "citation", "delta"])
def test_an_abandoned_stream_ends_quietly_and_its_trace_is_kept(notes_app: Citerag, exported: InMemorySpanExporter,
                                                                caplog: pytest.LogCaptureFixture,
                                                                left_after: str) -> None:
    caplog.set_level(logging.DEBUG)
    events = notes_app.collection().ask_events(f"{QUESTION} ({left_after})", AskOptions(threshold=2.0))
    while (event := _step(events)) is not None and event[0] != left_after:
        pass
    assert event is not None  # left in the middle (the delta is sent from inside the check's span)
    assert isinstance(events, Generator)
    contextvars.copy_context().run(events.close)  # the client left: closed from another Context
    assert _problems(caplog) == []
    [ask] = [s for s in exported.get_finished_spans() if s.name == "citerag.ask"]
    assert ask.context is not None
    trace_id = format(ask.context.trace_id, "032x")
    assert (ask.attributes or {}).get("citerag.abandoned") is True
    record = notes_app.collection().trace(trace_id)
    assert record is not None and root_span(record)["attributes"]["citerag.abandoned"] is True
