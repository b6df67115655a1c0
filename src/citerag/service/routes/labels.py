"""Production questions labelled over HTTP (citerag.app.labels): the next sampled answers with their passages, a
label kept (a needle's document and span, or out of domain), the labels so far. Write scope: labelling shows other
people's questions, which a reader of the collection does not otherwise get in bulk."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from citerag.app import labels
from citerag.service.auth import Caller, Writable
from citerag.service.errors import ApiError
from citerag.service.schemas import LabelRequest

router = APIRouter(prefix="/v1/collections/{name}/labels", tags=["labels"])


@router.get("/candidates", response_model=dict[str, Any])
def candidates(collection: Writable, n: Annotated[int, Query(ge=1, le=200)] = 10,
               days: Annotated[int | None, Query(ge=1, le=3650)] = None) -> JSONResponse:
    """Up to `n` unlabelled answers (their question text kept), spread over the time asked, with the passages each
    retrieved; `suggested` is the passage feedback named as the right source."""
    since = (datetime.now(UTC) - timedelta(days=days)).timestamp() if days else 0.0
    found = labels.candidates(collection, n, since)
    return JSONResponse({"candidates": [dataclasses.asdict(c) for c in found]})


@router.post("", response_model=dict[str, Any])
def add(request: LabelRequest, collection: Writable, who: Caller) -> JSONResponse:
    """Label an answer's question: `document_id`, `start` and `end` (the needle, code points of the document's
    text), or `ood: true`. Labelling it again replaces the label."""
    try:
        kept = labels.label(collection, request.trace_id.lower(), who.key, document_id=request.document_id,
                            start=request.start, end=request.end, ood=request.ood)
    except labels.LabelError as exc:
        if exc.field == "trace_id" and str(exc).endswith("not found"):  # as for any answer a key cannot see
            raise ApiError(404, str(exc)) from None
        raise ApiError(422, str(exc), exc.field) from None
    return JSONResponse(dataclasses.asdict(kept))


@router.get("", response_model=dict[str, Any])
def listed(collection: Writable) -> JSONResponse:
    """Every label of the collection, in the order their questions were asked."""
    return JSONResponse({"labels": [dataclasses.asdict(x) for x in collection.store.labels()]})
