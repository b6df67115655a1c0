"""Who may see what. A key sees one collection (or all, for a server admin key); anything it may not see is a
404, exactly as if it did not exist, on every route: never a 200 with another collection's text, never a
403 that confirms a name. A collection it sees but may not change is a 403."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Path, Request

from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.keystore.base import LOCAL, Principal
from citerag.service.errors import ApiError
from citerag.service.schemas import COLLECTION_NAME
from citerag.service.state import Service

COOKIE = "citerag_key"


def service(request: Request) -> Service:
    svc: Service = request.app.state.service
    return svc


def presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.cookies.get(COOKIE) or None


def principal(request: Request) -> Principal:
    svc = service(request)
    found = LOCAL
    if svc.config.keys_required:
        token = presented_key(request)
        verified = svc.keys.verify(token) if token else None
        if verified is None:
            _limit(svc, request, None)  # failed guesses are counted too, per client address
            raise ApiError(401, "a valid API key is required (Authorization: Bearer crk_...)")
        found = verified
    _limit(svc, request, found)
    return found


def _limit(svc: Service, request: Request, who: Principal | None) -> None:
    if svc.limiter is None:
        return
    identity = f"key:{who.key}" if who is not None and who is not LOCAL else \
        f"addr:{request.client.host if request.client else '-'}"
    verdict = svc.limiter.hit(identity)
    if not verdict.allowed:
        raise ApiError(429, f"over the rate limit of {svc.limiter.rate} for this "
                            f"{'key' if identity.startswith('key:') else 'address'}: retry in "
                            f"{verdict.retry_after_s} s", headers={"Retry-After": str(verdict.retry_after_s)})


def server_admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.server_admin:
        raise ApiError(403, "creating collections needs a server admin key")
    return who


def collection_for(scope: str) -> Callable[..., Collection]:
    """A dependency giving the path's collection if the caller may `scope` it; 404 if it may not see it."""

    def dependency(request: Request, name: Annotated[str, Path(pattern=COLLECTION_NAME, max_length=64)],
                   who: Annotated[Principal, Depends(principal)]) -> Collection:
        svc = service(request)
        if not who.sees(name) or name not in svc.app.collection_names():
            raise ApiError(404, f"collection {name!r} not found")
        if not who.may(name, scope):
            raise ApiError(403, f"this key may not {'change' if scope == 'write' else 'administer'} "
                                f"collection {name!r}")
        try:
            return svc.app.collection(name)
        except CiteragError:
            raise ApiError(404, f"collection {name!r} not found") from None

    return dependency


reader = collection_for("read")
writer = collection_for("write")
admin = collection_for("admin")

# Route parameters: `collection: Readable` is the path's collection, checked for the caller.
Readable = Annotated[Collection, Depends(reader)]
Writable = Annotated[Collection, Depends(writer)]
Administrable = Annotated[Collection, Depends(admin)]
ServiceDep = Annotated[Service, Depends(service)]
Caller = Annotated[Principal, Depends(principal)]
