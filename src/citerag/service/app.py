"""The FastAPI application: thin routers over the application core (citerag.app), the same facade the CLI uses.

    citerag serve [--host 127.0.0.1] [--port 8000] [--no-keys]

OpenAPI at /openapi.json (docs at /docs), the API under /v1, the web page at /.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

from fastapi import FastAPI, Request, Response
from fastapi.staticfiles import StaticFiles

from citerag import __version__
from citerag.app.home import Citerag, open_key_store, open_queue
from citerag.app.uploads import index_upload
from citerag.jobs import Job
from citerag.service import errors, metrics
from citerag.service.ratelimit import make_limiter
from citerag.service.routes import answers, collections, documents, pages, traces
from citerag.service.state import Service, ServiceConfig
from citerag.settings import Settings
from citerag.trace.setup import request_span
from citerag.types import UPLOAD_SCHEME

log = logging.getLogger("citerag.service")
TRACE_HEADER = "X-Trace-Id"
# The page's own scripts and styles only; nothing inline, nothing from elsewhere, never framed.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


def create_app(settings: Settings, config: ServiceConfig | None = None) -> FastAPI:
    """The service over the home collection in `settings` (its index folder) and the collections beside it."""
    config = config or ServiceConfig()
    config.check()
    limiter = make_limiter(config.rate_limit, config.rate_limit_storage)  # a storage it cannot reach: refused now

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        core = Citerag.open_home(settings)
        jobs = open_queue(settings, partial(index_upload, core))  # the thread queue's jobs run in this process
        svc = Service(core, open_key_store(settings), jobs, config, limiter)
        api.state.service = svc
        api.state.metrics.bind(core, svc.jobs)
        svc.jobs.start()
        _requeue_pending(svc)
        try:
            yield
        finally:
            svc.jobs.stop()
            svc.keys.close()
            core.close()

    api = FastAPI(title="citerag", version=__version__, lifespan=lifespan,
                  description="Answers with citations that open the source at the quote, or NO ANSWER.")
    errors.install(api)
    api.state.metrics = metrics.Metrics()
    for router in (collections.router, documents.router, answers.router, pages.router, metrics.router,
                   traces.router):
        api.include_router(router)
    api.mount("/static", StaticFiles(directory=pages.STATIC), name="static")

    @api.middleware("http")
    async def headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        # The request's span (continuing an incoming traceparent): a query's trace is the request's trace.
        with request_span(request.method, request.url.path, request.headers) as trace_id:
            request.state.trace_id = trace_id or uuid.uuid4().hex
            response = await call_next(request)
        response.headers[TRACE_HEADER] = request.state.trace_id
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        return response

    api.add_middleware(errors.LimitBody, limit=int(config.max_upload_mb * 1048576), pause_s=config.client_timeout_s)
    api.add_middleware(metrics.RequestMetrics, metrics=api.state.metrics)
    return api


def _requeue_pending(svc: Service) -> None:
    """Uploads left pending without a job (a stopped server's thread queue; a shared queue's jobs outlive it) are
    indexed now, from their stored bytes."""
    for name in svc.app.collection_names():
        collection = svc.app.collection(name)
        for doc in collection.documents():
            if doc.status == "pending" and doc.source_path.startswith(UPLOAD_SCHEME) \
                    and svc.jobs.state(name, doc.id) is None:
                svc.jobs.submit(Job(name, doc.id, doc.name, doc.sha256))
