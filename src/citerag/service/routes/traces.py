"""A kept trace (citerag.trace.store): its spans as JSON, for a key that sees the trace's collection and may read
every document it names; for any other key it does not exist (404), exactly as for every other route."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Path

from citerag.app import access
from citerag.errors import CiteragError
from citerag.service.auth import Caller, ServiceDep
from citerag.service.errors import not_found

router = APIRouter(prefix="/v1/traces", tags=["traces"])
# A trace is written just after its operation, off the request path (citerag.trace.writer): in this process a read
# waits for it, but in a database every API process shares, an id another process returned a moment ago may be on
# its way still. A miss there is looked for again, for up to this long, before the 404.
SHARED_ARRIVAL_S = 2.0


@router.get("/{trace_id}")
def get_trace(trace_id: Annotated[str, Path(pattern=r"^[0-9a-fA-F]{32}$")], svc: ServiceDep,
              who: Caller) -> dict[str, Any]:
    """The trace (the X-Trace-Id of a search or an answer): its operation, options and spans."""
    deadline, pause = time.monotonic() + SHARED_ARRIVAL_S, 0.01
    while True:
        shared = False
        for name in svc.app.collection_names():
            if not who.sees(name):  # only the caller's collections are looked in: another's trace is not found
                continue
            try:
                collection = svc.app.collection(name)
                record = collection.trace(trace_id.lower())
            except CiteragError:  # deleted meanwhile
                continue
            if record is not None and access.names_only_readable(collection, access.trace_documents(record),
                                                                  who.audience):
                return record
            if record is not None:  # it names a document the caller may not read: no such trace, for it
                raise not_found(f"trace {trace_id}")
            shared = shared or collection.settings.store_scheme != "sqlite"
        if not shared or time.monotonic() + pause > deadline:
            raise not_found(f"trace {trace_id}")
        time.sleep(pause)
        pause = min(pause * 2, 0.25)
