"""The audit trail (citerag.audit, docs/audit.md), read back: GET /v1/audit for a server admin key (every
collection's events and the server's own), GET /v1/collections/{name}/audit for an admin of that collection (its
events only; a reader or writer gets a 403, another collection's key a 404, as on every route). The filters are the
CLI's (`citerag audit`); a bad one is a 422 naming it. Newest first: {"events": [...], "retention_days": N}."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from fastapi.responses import JSONResponse

from citerag.audit.base import MAX_DOCUMENT, MAX_LIMIT, MAX_PRINCIPAL, AuditLog, AuditQueryError
from citerag.keystore.base import Principal
from citerag.service.auth import Administrable, ServiceDep, server_admin
from citerag.service.errors import ApiError
from citerag.service.schemas import COLLECTION_NAME

router = APIRouter(tags=["audit"])

Who = Annotated[str | None, Query(max_length=MAX_PRINCIPAL, description="key:PREFIX, user:NAME or local")]
Action = Annotated[str | None, Query(max_length=64, description="an action (search, document.read, ...) or a "
                                                                "family (document, key, user, session)")]
Document = Annotated[int | None, Query(ge=1, le=MAX_DOCUMENT, description="events that name this document id")]
Since = Annotated[str | None, Query(max_length=64, description="ISO 8601, UTC without an offset; at >= since")]
Until = Annotated[str | None, Query(max_length=64, description="ISO 8601, UTC without an offset; at < until")]
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT, description="the newest this many events")]


def _events(audit: AuditLog, **filters: Any) -> JSONResponse:
    try:
        found = audit.query(**filters)
    except AuditQueryError as exc:  # what the parameters' own checks cannot say: a time, an action, their order
        raise ApiError(422, str(exc), exc.field) from None
    return JSONResponse({"events": [e.as_json() for e in found], "retention_days": audit.retention_days})


@router.get("/v1/audit")
def server_audit(svc: ServiceDep, _: Annotated[Principal, Depends(server_admin)],
                 collection: Annotated[str | None, Query(pattern=COLLECTION_NAME, max_length=64)] = None,
                 principal: Who = None, action: Action = None, document: Document = None, since: Since = None,
                 until: Until = None, limit: Limit = 100) -> JSONResponse:
    """Every collection's audit events and the server's own (keys, users, collections), newest first."""
    return _events(svc.audit, collection=collection, principal=principal, action=action, document=document,
                   since=since, until=until, limit=limit)


@router.get("/v1/collections/{name}/audit")
def collection_audit(svc: ServiceDep, collection: Administrable, principal: Who = None, action: Action = None,
                     document: Document = None, since: Since = None, until: Until = None,
                     limit: Limit = 100) -> JSONResponse:
    """The collection's audit events, newest first (for an admin of the collection)."""
    return _events(svc.audit, collection=collection.name, principal=principal, action=action, document=document,
                   since=since, until=until, limit=limit)
