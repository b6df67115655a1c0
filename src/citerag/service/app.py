"""The FastAPI application: thin routers over the application core (citerag.app), the same facade the CLI uses.

    citerag serve [--host 127.0.0.1] [--port 8000] [--no-keys]

OpenAPI at /openapi.json (Swagger UI at /docs, served from the package: see routes/docs.py), the API under /v1,
the web page at /.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citerag import __version__
from citerag.app.home import Citerag, open_audit_log, open_key_store, open_queue
from citerag.app.syncer import Syncer
from citerag.app.uploads import index_upload
from citerag.jobs import Job
from citerag.service import errors, mcp, metrics
from citerag.service.auth import bearer_principal, service
from citerag.service.oidc import OidcClient
from citerag.service.ratelimit import make_limiter
from citerag.service.routes import (
    answers,
    audit,
    chat,
    collections,
    conversations,
    docs,
    documents,
    feedback,
    labels,
    pages,
    signin,
    sources,
    traces,
)
from citerag.service.state import Service, ServiceConfig
from citerag.settings import Settings
from citerag.trace.setup import request_span
from citerag.types import UPLOAD_SCHEME

log = logging.getLogger("citerag.service")
# Defined with the error shape (errors.py), where the one response sent before the application needs them too.
TRACE_HEADER, CSP = errors.TRACE_HEADER, errors.CSP


def create_app(settings: Settings, config: ServiceConfig | None = None) -> FastAPI:
    """The service over the home collection in `settings` (its index folder) and the collections beside it."""
    config = config or ServiceConfig()
    config.check()
    limiter = make_limiter(config.rate_limit, config.rate_limit_storage)  # a storage it cannot reach: refused now

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        core = Citerag.open_home(settings)
        jobs = open_queue(settings, partial(index_upload, core))  # the thread queue's jobs run in this process
        svc = Service(core, open_key_store(settings), jobs, config, limiter, Syncer(core, jobs),
                      open_audit_log(settings), OidcClient(config.oidc) if config.oidc else None)
        api.state.service = svc
        api.state.metrics.bind(core, svc.jobs)
        svc.jobs.start()
        _requeue_pending(svc)
        assert svc.syncer is not None
        svc.syncer.start()
        try:
            async with mcp_server.session_manager.run():
                yield
        finally:
            svc.syncer.stop()
            svc.jobs.stop()
            svc.keys.close()
            svc.audit.close()
            core.close()

    api = FastAPI(title="citerag", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Answers with citations that open the source at the quote, or NO ANSWER.")
    errors.install(api)
    api.state.metrics = metrics.Metrics()
    for router in (collections.router, documents.router, answers.router, feedback.router, labels.router,
                   conversations.router, chat.router, sources.router, pages.router, metrics.router, traces.router,
                   audit.router, signin.router, docs.router):
        api.include_router(router)
    mcp_server, mcp_routes = mcp.served(bearer_principal, lambda request: service(request).app, config.keys_required,
                                        lambda request: service(request).audit)
    api.router.routes.extend(mcp_routes)
    api.mount("/static", StaticFiles(directory=pages.STATIC), name="static")
    api.mount(docs.ASSETS_URL, docs.assets(), name="docs-assets")

    api.add_middleware(errors.LimitBody, limit=int(config.max_upload_mb * 1048576), pause_s=config.client_timeout_s)
    api.add_middleware(metrics.RequestMetrics, metrics=api.state.metrics)
    api.add_middleware(SecureResponses)  # added last: the outermost, around the two above
    return api


class SecureResponses:
    """The request's span and trace id, and the headers every response leaves with: X-Trace-Id, the security
    headers, the CSP unless the route set its own. The outermost of the application's middlewares, so that the
    body limit's refusals (413, 408) and the 500s get them too: a failure no handler knows is answered here (with
    its traceback logged once), since Starlette's own 500 would be sent from outside every middleware.

    Pure ASGI rather than @app.middleware("http"): the application runs in this task (the span is current in the
    handlers), and a streamed response gets its headers as it starts, and is inside the span to its last byte."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        # The request's span: a query's trace is the request's trace.
        with request_span(request.method, request.url.path, request.headers) as traced:
            trace_id = traced or uuid.uuid4().hex
            request.state.trace_id = trace_id  # in the scope: every Request made from it sees it
            started = False

            async def secured(message: Message) -> None:
                nonlocal started
                if message["type"] == "http.response.start":
                    started = True
                    headers = MutableHeaders(scope=message)
                    headers[TRACE_HEADER] = trace_id
                    for name, value in errors.SECURITY_HEADERS.items():
                        if name == "Content-Security-Policy":
                            headers.setdefault(name, value)  # a route's own policy stays (an original's sandbox)
                        else:
                            headers[name] = value
                await send(message)

            try:
                await self.app(scope, receive, secured)
            except Exception as exc:
                if started:
                    raise  # a response already under way: nothing more can be said to the client
                await errors.internal_error(request, exc)(scope, receive, secured)


def _requeue_pending(svc: Service) -> None:
    """Uploads left pending without a job (a stopped server's thread queue; a shared queue's jobs outlive it) are
    indexed now, from their stored bytes."""
    for name in svc.app.collection_names():
        collection = svc.app.collection(name)
        for doc in collection.documents():
            if doc.status == "pending" and doc.source_path.startswith(UPLOAD_SCHEME) \
                    and svc.jobs.state(name, doc.id) is None:
                svc.jobs.submit(Job(name, doc.id, doc.name, doc.sha256))
