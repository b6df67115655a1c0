"""Collections: create, list, get, delete. Each is an isolated index with its own settings and threshold."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import ValidationError

from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.keystore.base import Principal
from citerag.service import recording
from citerag.service.auth import Administrable, Caller, Readable, ServiceDep, server_admin
from citerag.service.errors import ApiError
from citerag.service.schemas import CreateCollection
from citerag.settings import CLIENT_SETTINGS

router = APIRouter(prefix="/v1/collections", tags=["collections"])


def collection_json(collection: Collection, who: Principal) -> dict[str, Any]:
    """The collection as `who` sees it: counts of the documents it may read only."""
    s = collection.settings
    status = collection.status(who.audience)
    return {"name": collection.name, "counts": status.counts,
            "settings": {key: getattr(s, key) for key in (*CLIENT_SETTINGS, "embedding_model", "generator")},
            # Which rule refuses questions here: the calibrated cuts (with their fit) or the threshold, and why;
            # and how questions are ranked.
            "refusal": status.refusal.as_json() if status.refusal else None,
            "retriever": status.retriever.as_json() if status.retriever else None}


@router.get("")
def list_collections(svc: ServiceDep, who: Caller) -> dict[str, Any]:
    names = [n for n in svc.app.collection_names() if who.sees(n)]
    return {"collections": [collection_json(svc.app.collection(n), who) for n in names]}


@router.post("", status_code=201)
def create_collection(request: CreateCollection, svc: ServiceDep,
                      who: Annotated[Principal, Depends(server_admin)]) -> dict[str, Any]:
    if request.name in svc.app.collection_names():
        raise ApiError(409, f"collection {request.name!r} already exists", "name")
    try:
        created = svc.app.create_collection(request.name, request.settings.model_dump(exclude_none=True))
    except CiteragError as exc:
        raise ApiError(422, str(exc), "settings") from None
    except ValidationError as exc:  # the settings as a whole, defaults included (overlap < target): a 422, not a 500
        problems = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
        field = f"settings.{problems[0][0]}" if problems and problems[0][0] else "settings"
        raise ApiError(422, "; ".join(f"settings.{loc}: {msg}" if loc else msg for loc, msg in problems)
                       or "invalid settings", field) from None
    recording.record(svc.audit, who, "collection.create", created)
    return collection_json(created, who)


@router.get("/{name}")
def get_collection(collection: Readable, who: Caller) -> dict[str, Any]:
    return collection_json(collection, who)


@router.delete("/{name}", status_code=204)
def delete_collection(collection: Administrable, svc: ServiceDep, who: Caller) -> Response:
    try:
        with collection.write_lock:
            svc.app.drop_collection(collection.name)
    except CiteragError as exc:
        raise ApiError(409, str(exc)) from None
    svc.keys.revoke_collection(collection.name)
    recording.record(svc.audit, who, "collection.delete", collection.name)
    return Response(status_code=204)
