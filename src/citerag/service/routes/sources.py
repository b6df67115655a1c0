"""Sources over HTTP (citerag.app.sources): add, list, show, sync and remove a collection's folders, Git
repositories and websites. Admin scope: a source reads from places on the server's side (a folder, a URL the
server can reach), which only the collection's administrator may point it at."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from citerag.app import sources
from citerag.errors import CiteragError
from citerag.service.auth import Administrable, service
from citerag.service.errors import ApiError
from citerag.service.schemas import SourceRequest
from citerag.types import SourceInfo

router = APIRouter(prefix="/v1/collections/{name}/sources", tags=["sources"])
SourceName = Annotated[str, Path(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$", description="The source's name.")]
OPTIONS = ("branch", "globs", "link", "sitemap", "prefix", "rate", "max_pages", "watch", "tags", "groups")


def _get(collection: Any, source: str) -> SourceInfo:
    try:
        return sources.get(collection, source)
    except CiteragError as exc:
        raise ApiError(404, str(exc)) from None


@router.get("", response_model=dict[str, Any])
def listed(collection: Administrable) -> JSONResponse:
    """Every source of the collection with its status."""
    return JSONResponse({"sources": [sources.view(s) for s in collection.store.sources()]})


@router.post("", status_code=201, response_model=dict[str, Any])
def add(request: SourceRequest, collection: Administrable) -> JSONResponse:
    """Add a source; it syncs on its schedule (`interval_s` or `cron`), or when asked (POST .../sync)."""
    options = {k: getattr(request, k) for k in OPTIONS if getattr(request, k) is not None}
    info = SourceInfo(request.name, request.kind, request.location, options, request.interval_s, request.cron)
    try:
        added = sources.add(collection, info, confined=True)
    except sources.OutsideRoots as exc:
        raise ApiError(403, str(exc), "location") from None
    except CiteragError as exc:
        status = 409 if "exists" in str(exc) else 422
        raise ApiError(status, str(exc), None if status == 409 else _field(str(exc))) from None
    return JSONResponse(sources.view(added), status_code=201)


def _field(message: str) -> str:
    """The request field a validation message is about (its first word names it)."""
    first = message.split(" ", 1)[0]
    return {"source": "name", "a": "options", "folder": "location", "web": "location", "give": "cron",
            "tags": "tags", "groups": "groups"}.get(
        first, first)


@router.get("/{source}", response_model=dict[str, Any])
def show(source: SourceName, collection: Administrable) -> JSONResponse:
    """The source's configuration and status: last attempt and success, counts, last error, next run."""
    return JSONResponse(sources.view(_get(collection, source)))


@router.post("/{source}/sync", response_model=dict[str, Any])
def sync(source: SourceName, collection: Administrable, http: Request,
         wait: Annotated[bool, Query(description="Sync in this request and answer with its report.")] = False,
         ) -> JSONResponse:
    """Sync the source: now, answering with the report (`wait=true`; 409 while another sync runs), or soon, in the
    background (202)."""
    _get(collection, source)
    if not wait:
        syncer = service(http).syncer
        if syncer is None:
            raise ApiError(503, "this server runs no source scheduler: ask with wait=true")
        syncer.ask(collection.name, source)
        return JSONResponse({"source": source, "queued": True}, status_code=202)
    try:
        report = sources.sync(collection, source)
    except sources.SourceBusy as exc:
        raise ApiError(409, str(exc)) from None
    return JSONResponse(report.as_json())


@router.delete("/{source}", response_model=dict[str, Any])
def remove(source: SourceName, collection: Administrable) -> JSONResponse:
    """Remove the source and the documents it holds (uploads and other sources' documents stay)."""
    _get(collection, source)
    try:
        removed = sources.remove(collection, source)
    except sources.SourceBusy as exc:
        raise ApiError(409, str(exc)) from None
    return JSONResponse({"source": source, "removed_documents": removed})
