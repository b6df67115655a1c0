"""Documents: upload (202, indexed in the background), status (polled or as server-sent events), replace, delete,
retry, and the sources themselves: the original file and the canonical text a citation's range points into."""

from __future__ import annotations

import asyncio
import json
import mimetypes
from collections.abc import AsyncIterator
from pathlib import PurePosixPath
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Path, Query, Request, Response, UploadFile
from fastapi.responses import FileResponse, PlainTextResponse
from pydantic import BeforeValidator
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from citerag.app import access, uploads
from citerag.app.collection import Collection
from citerag.app.models import FilterError, checked_tags
from citerag.app.names import UnusableName, upload_name
from citerag.errors import CiteragError
from citerag.keystore.base import Principal, checked_groups
from citerag.service import recording
from citerag.service.auth import Caller, Readable, ServiceDep, Writable
from citerag.service.errors import ApiError
from citerag.service.present import HTML_SUFFIXES, document_json, document_url
from citerag.service.schemas import GroupsRequest, TagsRequest
from citerag.service.state import Service
from citerag.types import UPLOAD_SCHEME, Document, readable_by

router = APIRouter(prefix="/v1/collections/{name}/documents", tags=["documents"])
STATIC = PurePosixPath(__file__).parent.parent / "static"


def _decimal(value: object) -> object:
    """A path id as written: ASCII decimal digits only. Left to pydantic, `1.0`, `+1`, ` 1`, `1_0` and other
    scripts' digits would all open document 1, so one document would have many URLs."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("a document id is written in decimal digits only (no sign, point or spaces)")
    return value


# Still an integer to the schema, bounded there; the validator after Path, else the schema says "ge" for "minimum".
DocumentId = Annotated[int, Path(ge=1, le=2**53, description="The document's id."), BeforeValidator(_decimal)]
# What an original may run in the browser: nothing. An uploaded HTML page is shown, never trusted.
SANDBOX = "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _json(svc: Service, collection: Collection, doc: Document) -> dict[str, Any]:
    return document_json(collection.name, doc, collection.is_stale(doc), svc.jobs.state(collection.name, doc.id))


def _document(collection: Collection, document_id: int, who: Principal) -> Document:
    """The document, or a 404 both when there is none and when the caller may not read it (the same words)."""
    try:
        return access.document(collection, document_id, who.audience)
    except access.NotReadable:
        raise ApiError(404, f"document {document_id} not found in collection {collection.name!r}") from None


def _file_name(upload: UploadFile, field: str) -> str:
    """The upload's own name (citerag.app.names): it names the document and picks the extractor, never a path."""
    try:
        return upload_name(upload.filename or "")
    except UnusableName as exc:
        raise ApiError(422, str(exc), field) from None


def _read(upload: UploadFile, limit_mb: float) -> bytes:
    data = upload.file.read(int(limit_mb * 1048576) + 1)
    if len(data) > limit_mb * 1048576:
        raise ApiError(413, f"{upload.filename} is over the {limit_mb:g} MB limit per file (max_file_mb)", "files")
    return data


@router.get("")
def list_documents(collection: Readable, svc: ServiceDep, who: Caller) -> dict[str, Any]:
    return {"documents": [_json(svc, collection, d) for d in access.documents(collection, who.audience)]}


def _tags(values: list[str], field: str) -> list[str]:
    try:
        return checked_tags(values, field)
    except FilterError as exc:
        raise ApiError(422, str(exc), field) from None


def _groups(values: list[str], field: str) -> list[str]:
    try:
        return checked_groups(values, field)
    except CiteragError as exc:
        raise ApiError(422, str(exc), field) from None


@router.post("", status_code=202)
def upload(files: Annotated[list[UploadFile], File(description="One or more files (repeat the field).")],
           collection: Writable, svc: ServiceDep, who: Caller,
           tags: Annotated[list[str] | None, Form(description="Tags for every file (repeat the field); they "
                                                               "replace an existing document's.")] = None,
           groups: Annotated[list[str] | None, Form(description="The groups that may read every file (repeat the "
                                                                 "field; none: everyone who may read the "
                                                                 "collection); they replace an existing "
                                                                 "document's.")] = None,
           ) -> dict[str, Any]:
    if len(files) > svc.config.max_files:
        raise ApiError(413, f"{len(files)} files in one request; at most {svc.config.max_files}", "files")
    named = [(_file_name(f, "files"), f) for f in files]  # every name checked before anything is stored
    given = None if tags is None else _tags(tags, "tags")
    readers = None if groups is None else _groups(groups, "groups")
    for name, _ in named:
        held = collection.store.document_by_path(UPLOAD_SCHEME + name)
        if held is not None and not readable_by(held.groups, who.audience):
            # Neither its id nor anything of it: only that the name the caller chose is taken.
            raise ApiError(409, f"the name {name!r} is taken in this collection: upload under another name",
                           "files")
    out: list[dict[str, Any]] = []
    for name, file in named:
        taken = uploads.upload(collection, svc.jobs, name, _read(file, collection.settings.max_file_mb), given,
                               readers)
        doc = taken.document
        if taken.conflict:
            raise ApiError(409, f"a different {name!r} is already document {doc.id}: replace it with "
                                f"PUT {document_url(collection.name, doc.id)}", "files")
        out.append({"id": doc.id, "name": doc.name, "status": doc.status, "existed": taken.existed,
                    "sha256": taken.sha256})
    recording.record(svc.audit, who, "document.upload", collection, documents=[d["id"] for d in out],
                     groups=readers, tags=given)
    return {"documents": out}


@router.get("/events")
async def events(request: Request, collection: Readable, svc: ServiceDep, who: Caller,
                 ids: Annotated[str, Query(pattern=r"^[0-9]{0,12}(,[0-9]{1,12}){0,199}$",
                                           description="Comma-separated document ids; empty = all.")] = ""
                 ) -> EventSourceResponse:
    """`status` events (a document's JSON) whenever one changes; `done` once every named document is settled (one
    the caller may not read is one that does not exist: `missing`)."""
    wanted = {int(i) for i in ids.split(",") if i}

    async def stream() -> AsyncIterator[dict[str, str]]:
        last: dict[int, str] = {}
        while not await request.is_disconnected():
            docs = await run_in_threadpool(lambda: [_json(svc, collection, d)
                                                    for d in access.documents(collection, who.audience)
                                                    if not wanted or d.id in wanted])
            for doc in docs:
                encoded = json.dumps(doc)
                if last.get(doc["id"]) != encoded:
                    last[doc["id"]] = encoded
                    yield {"event": "status", "data": encoded}
            present = {d["id"] for d in docs}
            if wanted and all(d["status"] != "pending" and d["job"] is None for d in docs):
                yield {"event": "done", "data": json.dumps({"missing": sorted(wanted - present)})}
                return
            await asyncio.sleep(0.3)

    return EventSourceResponse(stream(), ping=15)


@router.get("/{document_id}")
def get_document(document_id: DocumentId, collection: Readable, svc: ServiceDep, who: Caller) -> dict[str, Any]:
    doc = _document(collection, document_id, who)
    recording.record(svc.audit, who, "document.read", collection, documents=[doc.id], what="metadata")
    return _json(svc, collection, doc)


@router.put("/{document_id}", status_code=202)
def replace(document_id: DocumentId, file: Annotated[UploadFile, File(description="The new version.")],
            collection: Writable, svc: ServiceDep, who: Caller) -> dict[str, Any]:
    """A new version is built and committed before the old one stops being served; if it fails, the old one
    stays and the document says why."""
    doc = _document(collection, document_id, who)
    name = _file_name(file, "file")
    if PurePosixPath(name).suffix.lower() != PurePosixPath(doc.name).suffix.lower():
        raise ApiError(422, f"the new version must have the same format as {doc.name!r}", "file")
    sha = uploads.replace(collection, svc.jobs, doc, _read(file, collection.settings.max_file_mb))
    recording.record(svc.audit, who, "document.upload", collection, documents=[doc.id], replaced=True)
    return {**_json(svc, collection, doc), "submitted_sha256": sha}


@router.put("/{document_id}/tags")
def put_tags(document_id: DocumentId, request: TagsRequest, collection: Writable, svc: ServiceDep,
             who: Caller) -> dict[str, Any]:
    """Replace the document's tags; the next search after this returns sees them (a new generation)."""
    doc = _document(collection, document_id, who)
    changed = uploads.set_tags(collection, doc, _tags(request.tags, "tags"))
    recording.record(svc.audit, who, "document.tags", collection, documents=[doc.id], tags=changed.tags)
    return _json(svc, collection, changed)


@router.put("/{document_id}/groups")
def put_groups(document_id: DocumentId, request: GroupsRequest, collection: Writable, svc: ServiceDep,
               who: Caller) -> dict[str, Any]:
    """Replace the groups that may read the document ([]: everyone who may read the collection), in one
    transaction: the next request after this returns, on every route, reads with them. Only a caller who may read
    the document may change them."""
    doc = _document(collection, document_id, who)
    before = doc.groups
    changed = uploads.set_groups(collection, doc, _groups(request.groups, "groups"))
    recording.record(svc.audit, who, "document.groups", collection, documents=[doc.id], groups=changed.groups,
                     before=before)
    return _json(svc, collection, changed)


@router.delete("/{document_id}", status_code=204)
def delete(document_id: DocumentId, collection: Writable, svc: ServiceDep, who: Caller) -> Response:
    uploads.delete(collection, svc.jobs, _document(collection, document_id, who))
    recording.record(svc.audit, who, "document.delete", collection, documents=[document_id])
    return Response(status_code=204)


@router.post("/{document_id}/retry", status_code=202)
def retry(document_id: DocumentId, collection: Writable, svc: ServiceDep, who: Caller) -> dict[str, Any]:
    doc = _document(collection, document_id, who)
    if doc.status == "indexed" and not doc.error:
        raise ApiError(409, f"document {doc.id} is indexed; nothing to retry")
    uploads.retry(collection, svc.jobs, doc)
    return _json(svc, collection, doc)


@router.get("/{document_id}/file", response_model=None)
def original(document_id: DocumentId, collection: Readable, who: Caller, svc: ServiceDep) -> Response:
    """The original bytes of the served version: a PDF opens at #page=N, an HTML page at its #:~:text= quote."""
    doc = _document(collection, document_id, who)
    recording.record(svc.audit, who, "document.read", collection, documents=[doc.id], what="file")
    data = collection.read_original(doc)
    if data is None:
        raise ApiError(410, f"the original of {doc.name!r} is no longer where it was indexed from")
    suffix = PurePosixPath(doc.name).suffix.lower()
    media = mimetypes.guess_type(doc.name)[0] or "application/octet-stream"
    headers = {"Content-Security-Policy": SANDBOX}
    if suffix in HTML_SUFFIXES:
        media = "text/html"
    elif suffix == ".pdf":
        headers = {"Content-Security-Policy": "frame-ancestors 'none'"}  # a sandbox would block the PDF viewer
    elif media.startswith("text/") or suffix in (".md", ".vtt", ".srt", ".csv"):
        media = "text/plain"
    else:
        headers["Content-Disposition"] = f"attachment; filename*=UTF-8''{_rfc5987(doc.name)}"
    if media.startswith("text/"):
        media += "; charset=utf-8" if _utf8(data) else ""
    return Response(data, media_type=media, headers=headers)


@router.get("/{document_id}/text", response_class=PlainTextResponse)
def text(document_id: DocumentId, collection: Readable, who: Caller, svc: ServiceDep) -> PlainTextResponse:
    """The canonical text every citation's #char=a,b range indexes into (code points)."""
    doc = _document(collection, document_id, who)
    recording.record(svc.audit, who, "document.read", collection, documents=[doc.id], what="text")
    if doc.status != "indexed":
        raise ApiError(409, f"document {doc.id} is {doc.status}: it has no text yet")
    return PlainTextResponse(collection.canonical_text(doc.id))


@router.get("/{document_id}/view", response_class=FileResponse)
def view(document_id: DocumentId, collection: Readable, who: Caller) -> FileResponse:
    """An HTML page showing the canonical text, the #char=a,b range highlighted and scrolled to."""
    _document(collection, document_id, who)
    return FileResponse(str(STATIC / "view.html"), media_type="text/html")


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _rfc5987(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")
