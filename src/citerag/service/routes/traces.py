"""A kept trace (citerag.trace.store): its spans as JSON, for a key that sees the trace's collection; for any
other key it does not exist (404), exactly as for every other route."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from citerag.errors import CiteragError
from citerag.service.auth import Caller, ServiceDep
from citerag.service.errors import not_found

router = APIRouter(prefix="/v1/traces", tags=["traces"])


@router.get("/{trace_id}")
def get_trace(trace_id: Annotated[str, Path(pattern=r"^[0-9a-fA-F]{32}$")], svc: ServiceDep,
              who: Caller) -> dict[str, Any]:
    """The trace (the X-Trace-Id of a search or an answer): its operation, options and spans."""
    for name in svc.app.collection_names():
        if not who.sees(name):  # only the caller's collections are looked in: another's trace is not found
            continue
        try:
            record = svc.app.collection(name).trace(trace_id.lower())
        except CiteragError:  # deleted meanwhile
            continue
        if record is not None:
            return record
    raise not_found(f"trace {trace_id}")
