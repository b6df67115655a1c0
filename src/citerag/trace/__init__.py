"""Traces of every query and every indexed document (OpenTelemetry): set-up and exporters (setup.py), the
per-collection trace store (store.py), and replay of a stored query against today's index (replay.py)."""

from citerag.trace.setup import (
    OPERATION,
    configure,
    current_trace_id,
    detached,
    hit_attributes,
    sink,
    traced_events,
    tracer,
)

__all__ = ["OPERATION", "configure", "current_trace_id", "detached", "hit_attributes", "sink", "traced_events",
           "tracer"]
