"""Production questions labelled over HTTP (citerag.app.labels): the next sampled answers with their passages, a
label kept (a needle's document and span, or out of domain), the labels so far. Write scope: labelling shows other
people's questions, which a reader of the collection does not otherwise get in bulk."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from citerag.app import access, labels
from citerag.app.collection import Collection
from citerag.keystore.base import Principal
from citerag.service.auth import Caller, Writable
from citerag.service.errors import ApiError
from citerag.service.schemas import LabelRequest

router = APIRouter(prefix="/v1/collections/{name}/labels", tags=["labels"])


def _labeller(collection: Collection, who: Principal) -> Collection:
    """Labelling reads answers' questions and passages whatever documents they cite: a collection with documents the
    caller may not read is labelled by a key that reads them all (admin scope)."""
    if access.hidden_ids(collection, who.audience):
        raise ApiError(403, "this collection has documents this key may not read: labelling it needs a key that "
                            "reads them all (scope admin)")
    return collection


@router.get("/candidates", response_model=dict[str, Any])
def candidates(collection: Writable, who: Caller, n: Annotated[int, Query(ge=1, le=200)] = 10,
               days: Annotated[int | None, Query(ge=1, le=3650)] = None) -> JSONResponse:
    """Up to `n` unlabelled answers (their question text kept), spread over the time asked, with the passages each
    retrieved; `suggested` is the passage feedback named as the right source."""
    since = (datetime.now(UTC) - timedelta(days=days)).timestamp() if days else 0.0
    found = labels.candidates(_labeller(collection, who), n, since)
    return JSONResponse({"candidates": [dataclasses.asdict(c) for c in found]})


@router.post("", response_model=dict[str, Any])
def add(request: LabelRequest, collection: Writable, who: Caller) -> JSONResponse:
    """Label an answer's question: `document_id`, `start` and `end` (the needle, code points of the document's
    text), or `ood: true`. Labelling it again replaces the label."""
    try:
        kept = labels.label(_labeller(collection, who), request.trace_id.lower(), who.key,
                            document_id=request.document_id, start=request.start, end=request.end, ood=request.ood)
    except labels.LabelError as exc:
        if exc.field == "trace_id" and str(exc).endswith("not found"):  # as for any answer a key cannot see
            raise ApiError(404, str(exc)) from None
        raise ApiError(422, str(exc), exc.field) from None
    return JSONResponse(dataclasses.asdict(kept))


@router.get("", response_model=dict[str, Any])
def listed(collection: Writable, who: Caller) -> JSONResponse:
    """Every label of the collection, in the order their questions were asked."""
    return JSONResponse({"labels": [dataclasses.asdict(x) for x in _labeller(collection, who).store.labels()]})
