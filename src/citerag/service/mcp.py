"""citerag as an MCP server (Model Context Protocol, the official `mcp` SDK): the tools an agent calls.

    search            ranked passages of a collection, each with its exact character range and quote
    ask               an answer whose [n] markers name the citations listed with it, or a refusal
    list_collections  the collections the caller may read
    read_document     a character range of a document's canonical text (what every citation's range indexes)

Two transports, one set of tools: `citerag mcp` over stdio (the local user: every collection of the home, as the
CLI), and streamable HTTP at `/mcp` on `citerag serve`, where the request's API key decides what is seen exactly as
on the REST routes: a collection it may not read is "not found", never a different error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from citerag import __version__
from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.app.models import AskOptions, Filters, SearchOptions, check_text
from citerag.audit.base import AuditLog, NoAudit
from citerag.errors import CiteragError
from citerag.keystore.base import LOCAL, Principal
from citerag.service import recording
from citerag.service.errors import ApiError
from citerag.service.present import answer_json, search_json
from citerag.types import readable_by

PATH = "/mcp"
MAX_READ = 20_000  # characters read_document returns at most in one call: an agent pages through longer ranges


@dataclass(frozen=True)
class Access:
    """Whose call this is: the core it reads and the principal whose key decides what it may see."""

    core: Citerag
    who: Principal
    audit: AuditLog = field(default_factory=NoAudit)  # the service's trail (none for the local stdio user)


Resolve = Callable[[Context], Access]


def _collection(access: Access, name: str) -> Collection:
    if not access.who.sees(name) or name not in access.core.collection_names():
        raise ToolError(f"collection {name!r} not found")
    try:
        return access.core.collection(name)
    except CiteragError:
        raise ToolError(f"collection {name!r} not found") from None


def _text(value: str, field: str) -> str:
    try:
        return check_text(value, field)
    except CiteragError as exc:
        raise ToolError(str(exc)) from None


def build(resolve: Resolve) -> MCPServer:
    """The MCP server with citerag's four tools; `resolve` says, per call, whose call it is."""
    server: MCPServer = MCPServer("citerag", version=__version__,
                                  instructions="Search and cite the team's own documents. Every claim of an answer "
                                               "carries [n]; citation n gives the document and the exact range.")

    @server.tool()
    def list_collections(ctx: Context) -> dict[str, Any]:
        """The collections you may read, with how many documents each holds."""
        access = resolve(ctx)
        names = [n for n in access.core.collection_names() if access.who.sees(n)]
        return {"collections": [{"name": n, "documents": len(access.core.collection(n).status(access.who.audience)
                                                             .documents)} for n in names]}

    @server.tool()
    def search(ctx: Context, collection: str, query: str, k: int = 5,
               filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """Passages of `collection` ranked for `query` (hybrid: meaning and exact words); each result has the
        document, its section, the quote and its character range [start, end) in the document's text. `filters`
        limits the documents searched: {"source": ..., "type": "pdf", "path": "docs/**", "language": "de",
        "since": "2026-01-01", "until": ...}, each a string or a list of strings (any one matches)."""
        if not 1 <= k <= 50:
            raise ToolError("k: expected 1 to 50")
        caller = resolve(ctx)
        target = _collection(caller, collection)
        text = _text(query, "query")
        try:
            result = target.search(text, SearchOptions(k=k, filters=Filters.parse(filters).seen_by(
                caller.who.audience)))
        except CiteragError as exc:
            raise ToolError(str(exc)) from None
        recording.searched(caller.audit, caller.who, target, text, result, via="mcp")
        return search_json(target.name, text, result)

    @server.tool()
    def ask(ctx: Context, collection: str, question: str, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """An answer from `collection`'s documents: its [n] markers name the entries of `citations` (document,
        section, quote, character range). `refused` is true, with no citations, when nothing in the collection
        is close enough to the question: say so rather than answer from elsewhere. `filters` as for search."""
        caller = resolve(ctx)
        target = _collection(caller, collection)
        text = _text(question, "question")
        try:
            answer = target.ask(text, AskOptions(filters=Filters.parse(filters).seen_by(caller.who.audience)))
        except CiteragError as exc:
            raise ToolError(str(exc)) from None
        recording.answered(caller.audit, caller.who, "ask", target, text, answer, via="mcp")
        return answer_json(target.name, answer)

    @server.tool()
    def read_document(ctx: Context, collection: str, document_id: int, start: int = 0,
                      end: int | None = None) -> dict[str, Any]:
        """Characters [start, end) of a document's canonical text, the text citation ranges index into (at most
        20,000 per call; `end` omitted: as far as that allows). Read around a quote to see its context."""
        caller = resolve(ctx)
        target = _collection(caller, collection)
        doc = target.document(document_id)
        if doc is None or not readable_by(doc.groups, caller.who.audience):  # the same words for both
            raise ToolError(f"document {document_id} not found in collection {collection!r}")
        if doc.status != "indexed":
            raise ToolError(f"document {document_id} is {doc.status}: it has no text yet")
        full = target.canonical_text(doc.id)
        recording.record(caller.audit, caller.who, "document.read", target, documents=[doc.id], what="text",
                         via="mcp")
        stop = min(len(full), start + MAX_READ if end is None else end)
        if start < 0 or stop < start or (end is not None and end - start > MAX_READ):
            raise ToolError(f"start and end: expected 0 <= start <= end and at most {MAX_READ} characters")
        return {"document_id": doc.id, "name": doc.name, "title": doc.title, "length": len(full),
                "start": start, "end": stop, "text": full[start:stop]}

    return server


def local(core: Citerag) -> MCPServer:
    """`citerag mcp`: the local user over stdio, who may read every collection of the home (as the CLI may)."""
    return build(lambda ctx: Access(core, LOCAL))


def _request(ctx: Context) -> Request:
    request = ctx.request_context.request
    if not isinstance(request, Request):
        raise ToolError("this tool is served over HTTP only here")
    return request


def served(principal_of: Callable[[Request, bool], Principal], core_of: Callable[[Request], Citerag],
           keys_required: bool, audit_of: Callable[[Request], AuditLog] = lambda _: NoAudit()
           ) -> tuple[MCPServer, list[BaseRoute]]:
    """The server for the service's `/mcp`, and its route. `principal_of(request, count)` gives the request's
    principal or raises the API's own 401/429 (ApiError): once before the protocol sees the request (counted
    against the rate limit), and again in each tool call from that call's request, so that every call is checked
    against the key store as it is then (a key revoked mid-session stops at once)."""

    def resolve(ctx: Context) -> Access:
        request = _request(ctx)
        try:
            return Access(core_of(request), principal_of(request, False), audit_of(request))
        except ApiError as exc:
            raise ToolError(exc.message) from None

    server = build(resolve)
    # Behind keys the Bearer header is the protection (a browser never attaches one on its own); without keys
    # (loopback only) the SDK's DNS-rebinding check keeps another site's page from reaching the server.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False) if keys_required else None
    app = server.streamable_http_app(streamable_http_path=PATH, stateless_http=True, json_response=True,
                                     transport_security=security)
    routes: list[BaseRoute] = [Route(PATH, endpoint=_Guarded(route.app, principal_of),
                                     methods=["GET", "POST", "DELETE"])
                               for route in app.routes if isinstance(route, Route) and route.path == PATH]
    if not routes:
        raise RuntimeError(f"the mcp SDK served no route at {PATH}")
    return server, routes


class _Guarded:
    """The MCP endpoint behind the key check; the ApiError it raises is answered by the application's handler,
    in the API's error shape."""

    def __init__(self, app: ASGIApp, principal_of: Callable[[Request, bool], Principal]) -> None:
        self.app, self.principal_of = app, principal_of

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.principal_of(Request(scope), True)
        await self.app(scope, receive, send)
