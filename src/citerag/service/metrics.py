"""Prometheus metrics of one server: `GET /metrics` in the text exposition format (or OpenMetrics, as asked).

Every app has its own CollectorRegistry (never the process-wide default), so several servers in one process (the
tests) never collide. What is counted as it happens (requests, stage timings, answers vs refusals, ingest outcomes)
lives in prometheus_client's own Histogram and Counter; what the core already counts (cache hits and misses per
level, citation checks) and what the stores hold (documents by status) is read by a Collector at scrape time.

Labels are bounded: a route *template* (never a path with ids), a method, a status class, a stage, a collection
name (created by an admin), an outcome. No question, query or document text ever reaches a label or a value.

Collection names are shown only to the metrics token's holder. The API hides a collection from a key that may not
see it (a 404, as if it did not exist), so an open /metrics must not list them: without a configured token
(`ServiceConfig.metrics_token`), a scrape gets every series that has a `collection` label summed over the
collections, the label dropped (`citerag_documents{status="indexed"}` over the whole server); with one, the scrape
that presents it gets them per collection (chosen over aggregates for everyone: an operator who wants the
dashboard's per-collection panel sets the token, which Prometheus then sends).
"""

from __future__ import annotations

import hmac
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.app.shared import Shared
from citerag.app.uploads import counting
from citerag.jobs import IngestQueue
from citerag.jobs.metrics import IngestMetrics
from citerag.service.errors import ApiError
from citerag.types import Answer, SearchResult

log = logging.getLogger("citerag.service")

# Seconds. 2.0 is a bucket edge so that the p95-under-2-s objective (deploy/slo.yaml) is read without interpolation.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STAGES = ("embed", "retrieve", "rerank", "generate", "total")
DOCUMENT_STATUSES = ("indexed", "failed", "pending")

# The app whose metrics an open core's answers go to (routes see a Collection, whose .app is the core).
_BY_CORE: weakref.WeakKeyDictionary[Shared, Metrics] = weakref.WeakKeyDictionary()


class Metrics:
    """One server's registry and instruments; `bind` connects it to the core and the ingest queue at startup."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Histogram(
            "citerag_http_request_duration_seconds", "HTTP requests: seconds from request to the response's end.",
            ["route", "method", "status"], buckets=BUCKETS, registry=self.registry)
        self.stages = Histogram(
            "citerag_stage_duration_seconds", "Seconds per pipeline stage of answers and searches.",
            ["operation", "stage"], buckets=BUCKETS, registry=self.registry)
        self.answers = Counter("citerag_answers", "Answers given, by outcome: answered or refused (NO ANSWER).",
                               ["outcome"], registry=self.registry)
        # The arm is the experiment arm that answered ("a" or "b"), "default" outside an experiment.
        self.feedback = Counter("citerag_feedback", "Feedback given on answers, by collection, arm and verdict.",
                                ["collection", "arm", "verdict"], registry=self.registry)
        # An experiment's arms (citerag.app.experiments): answers and their seconds per arm.
        self.arm_answers = Counter("citerag_experiment_answers", "Answers in an experiment, by arm and outcome.",
                                   ["collection", "experiment", "arm", "outcome"], registry=self.registry)
        self.arm_seconds = Histogram("citerag_experiment_answer_duration_seconds",
                                     "Seconds per answer in an experiment, by arm.",
                                     ["collection", "experiment", "arm"], buckets=BUCKETS, registry=self.registry)
        # What the generator's model reported it used, and its cost at the configured price (token_prices).
        self.tokens = Counter("citerag_generation_tokens", "Tokens the model reported, by kind (prompt, completion).",
                              ["collection", "arm", "kind"], registry=self.registry)
        self.cost = Counter("citerag_generation_cost", "What the reported tokens cost at settings.token_prices.",
                            ["collection", "arm"], registry=self.registry)
        self.ingest = IngestMetrics(self.registry)
        self.queue_depth = Gauge("citerag_ingest_queue_depth", "Uploaded documents waiting to be indexed.",
                                 registry=self.registry)
        for outcome in ("answered", "refused"):
            self.answers.labels(outcome)
        for operation, stages in (("ask", STAGES), ("search", ("embed", "retrieve", "rerank"))):
            for stage in stages:
                self.stages.labels(operation, stage)
        self.core: Citerag | None = None
        self.registry.register(_CoreCollector(self))

    def bind(self, core: Citerag, jobs: IngestQueue) -> None:
        self.core = core
        _BY_CORE[core] = self
        jobs.on_finished = counting(core, self.ingest.finished)
        self.queue_depth.set_function(jobs.depth)

    # Fed by the routes and the queue.
    def observe_answer(self, answer: Answer) -> None:
        self.answers.labels("refused" if answer.refused else "answered").inc()
        self._stages("ask", answer.timings)

    def observe_search(self, result: SearchResult) -> None:
        self._stages("search", result.timings)

    def _stages(self, operation: str, timings: dict[str, float]) -> None:
        for stage, seconds in timings.items():
            if stage in STAGES:  # a stage added to the core later is not a new label until it is listed here
                self.stages.labels(operation, stage).observe(seconds)

    def exposition(self, accept: str | None, per_collection: bool = True) -> tuple[bytes, str]:
        """The scrape's body; `per_collection` False: series summed over collections, no collection named."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry if per_collection else self._aggregated), content_type

    @property
    def _aggregated(self) -> CollectorRegistry:
        view = CollectorRegistry(auto_describe=False)
        view.register(_WithoutCollections(self.registry))
        return view


def for_core(core: Shared) -> Metrics | None:
    return _BY_CORE.get(core)


def observe_answer(collection: Collection, answer: Answer) -> None:
    metrics = for_core(collection.app)
    if metrics is None:
        return
    metrics.observe_answer(answer)
    usage = answer.usage
    if usage is not None and not answer.cache.get("answer"):  # an answer replayed from the cache cost nothing
        arm = answer.arm or "default"
        for kind in ("prompt", "completion"):
            metrics.tokens.labels(collection.name, arm, kind).inc(usage[f"{kind}_tokens"])
        if usage.get("cost") is not None:
            metrics.cost.labels(collection.name, arm).inc(usage["cost"])
    if answer.arm and answer.experiment:  # marked by citerag.app.experiments
        labels = (collection.name, answer.experiment, answer.arm)
        metrics.arm_answers.labels(*labels, "refused" if answer.refused else "answered").inc()
        if "total" in answer.timings:
            metrics.arm_seconds.labels(*labels).observe(answer.timings["total"])


def observe_feedback(collection: Collection, helpful: bool, arm: str | None = None) -> None:
    metrics = for_core(collection.app)
    if metrics is not None:
        metrics.feedback.labels(collection.name, arm or "default", "helpful" if helpful else "unhelpful").inc()


def observe_search(collection: Collection, result: SearchResult) -> None:
    metrics = for_core(collection.app)
    if metrics is not None:
        metrics.observe_search(result)


def observe_events(collection: Collection, events: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """A streamed answer's events, passed through; the final answer is counted as it goes by."""
    for kind, value in events:
        if kind == "answer":
            observe_answer(collection, value)
        yield kind, value


class _CoreCollector(Collector):
    """What the core and the stores already know, read at scrape time (nothing is copied between scrapes)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        # name -> (the open collection, its store generation, counts); a collection dropped and created again under
        # its name is another object, so its counts are never taken for the old one's.
        self._documents: dict[str, tuple[Collection, int, dict[str, int]]] = {}
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        return []  # nothing to check at registration; collect() needs the bound core

    def collect(self) -> Iterable[Metric]:
        core = self.metrics.core
        if core is None:
            return
        cache = CounterMetricFamily("citerag_cache_requests", "Cache lookups per level, hit or miss.",
                                    labels=["level", "result"])
        for (level, result), count in _items(core.cache_counts):
            cache.add_metric([level, result], count)
        yield cache
        for name, value in core.citation_metrics.snapshot().items():
            if name.endswith("_total"):
                yield CounterMetricFamily(name.removesuffix("_total"), _CITATION_HELP.get(name, name), value=value)
            else:
                yield GaugeMetricFamily(name, _CITATION_HELP.get(name, name), value=value)
        documents = GaugeMetricFamily("citerag_documents", "Documents per open collection, by status.",
                                      labels=["collection", "status"])
        open_now = list(core.collections.items())
        with self._lock:
            for gone in set(self._documents) - {name for name, _ in open_now}:
                del self._documents[gone]
        for name, collection in open_now:
            counts = self._counts(name, collection)
            if counts is not None:
                for status in DOCUMENT_STATUSES:
                    documents.add_metric([name, status], counts.get(status, 0))
        yield documents
        yield from _source_gauges(open_now)

    def _counts(self, name: str, collection: Collection) -> dict[str, int] | None:
        """Counted again only when the store's generation moved (every upload, status change and delete bumps it),
        so a scrape of an unchanged collection costs one tiny read."""
        try:
            generation = collection.store.generation()
            with self._lock:
                known = self._documents.get(name)
            if known is not None and known[0] is collection and known[1] == generation:
                return known[2]
            counts: dict[str, int] = {}
            for doc in collection.documents():
                counts[doc.status] = counts.get(doc.status, 0) + 1
        except Exception as exc:  # a collection closed or dropped during the scrape: left out of this one
            log.debug("metrics: collection %s not counted: %s", name, exc)
            return None
        with self._lock:
            self._documents[name] = (collection, generation, counts)
        return counts


# Each source's status (citerag.app.sources) as gauges: what the CiteragSourceStalled alert and the page read.
_SOURCE_GAUGES = {
    "last_success_timestamp_seconds": ("last_success", "When the source's last sync succeeded."),
    "last_attempt_timestamp_seconds": ("last_attempt", "When the source's last sync began."),
    "next_run_timestamp_seconds": ("next_run", "When the source syncs next (absent: only when asked)."),
    "failures": ("failures", "Syncs of the source that failed in a row."),
    "documents": ("documents", "Documents the source holds."),
    "interval_seconds": ("interval_s", "The source's sync interval (0: cron or only when asked)."),
}


def _source_gauges(open_now: list[tuple[str, Collection]]) -> Iterator[Metric]:
    families = {k: GaugeMetricFamily(f"citerag_source_{k}", help_, labels=["collection", "source"])
                for k, (_, help_) in _SOURCE_GAUGES.items()}
    for name, collection in open_now:
        try:
            found = collection.store.sources()
        except Exception as exc:  # closed or dropped during the scrape
            log.debug("metrics: sources of %s not read: %s", name, exc)
            continue
        for info in found:
            values = {"failures": 0, "documents": 0, **info.status, "interval_s": info.interval_s or 0}
            for k, (field, _) in _SOURCE_GAUGES.items():
                if values.get(field) is not None:
                    families[k].add_metric([name, info.name], float(values[field]))
    yield from families.values()


_CITATION_HELP = {
    "citerag_answers_checked_total": "Answers whose citations were checked.",
    "citerag_answers_flagged_total": "Flags raised by the citation check.",
    "citerag_invalid_markers_removed_total": "Citation markers naming no source, removed.",
    "citerag_links_removed_total": "Links and HTML tags the generator wrote, removed (the server writes links).",
    "citerag_unused_sources_total": "Sources given to the generator and not cited.",
    "citerag_answer_sentences_total": "Sentences in checked answers.",
    "citerag_cited_sentences_total": "Sentences in checked answers that cite a source.",
    "citerag_citation_accuracy": "Cited sentences over all sentences of checked answers.",
    "citerag_citation_accuracy_mean": "Mean per-answer citation accuracy.",
}


class _WithoutCollections(Collector):
    """A registry's metrics with the `collection` label summed away: what an open /metrics shows. Generic, so a
    labelled series added later cannot leak names by being forgotten here."""

    LABEL = "collection"

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        for family in self.registry.collect():
            if not any(self.LABEL in sample.labels for sample in family.samples):
                yield family
                continue
            summed: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
            for sample in family.samples:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != self.LABEL))
                summed[(sample.name, labels)] = summed.get((sample.name, labels), 0.0) + sample.value
            aggregate = Metric(family.name, family.documentation, family.type, family.unit)
            for (name, labels), total in summed.items():
                aggregate.add_sample(name, dict(labels), total)
            yield aggregate


def _items(counter: dict[tuple[str, str], int]) -> list[tuple[tuple[str, str], int]]:
    # The core's Counter is written by request threads without a lock; a copy made while a new key appears
    # raises RuntimeError, so try again (a key appears once per level and result).
    for _ in range(5):
        try:
            return list(counter.items())
        except RuntimeError:
            time.sleep(0)
    return []


class RequestMetrics:
    """Request latency by route template, method and status class.

    Hand-written because prometheus_client has no ASGI middleware of its own (only the /metrics app). A plain ASGI
    middleware, not @app.middleware("http"): it sees the status a streamed response starts with and times the
    response to its last byte; the route template is read from the scope the router filled in.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None)
            # Unmatched paths (404s, static files) share one label: a path is never a label value.
            self.metrics.requests.labels(route if isinstance(route, str) else "other", scope.get("method", ""),
                                         f"{status // 100}xx").observe(time.perf_counter() - started)


router = APIRouter()


@router.get("/metrics", include_in_schema=False)
def metrics_endpoint(request: Request) -> Response:
    """Open without a configured token (nothing here is document text, and no collection is named: see the module's
    docstring); else `Authorization: Bearer TOKEN`, and per collection."""
    token = request.app.state.service.config.metrics_token
    if token is not None:
        presented = request.headers.get("authorization", "")
        scheme, _, value = presented.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
            raise ApiError(401, "the metrics need the metrics token: Authorization: Bearer TOKEN")
    body, content_type = request.app.state.metrics.exposition(request.headers.get("accept"),
                                                              per_collection=token is not None)
    return Response(body, media_type=content_type)
