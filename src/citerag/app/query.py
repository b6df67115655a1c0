"""The question path, in one place: embed → retrieve → rerank → gate → cite → generate → check, with the three
caches and the trace wrapped around it.

A question reads one store view. An answer in the answer cache (keyed by the store's generation) is replayed from
a view of that generation without opening the search indexes, and so is a search in the retrieval cache;
otherwise the retrieval (or the cached retrieval's rows), the gate and the canonical texts of the cited documents
all come from one view opened inside the search backend's lock, and the generator runs after it has closed, so a
slow model holds neither the indexes nor the database. The gate runs once: what it keeps is what is cited.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from citerag.answer.citations import cite
from citerag.answer.pipeline import answer_events, gate_hits, retrieve
from citerag.app.caching import ANSWER_SETTINGS, RETRIEVAL_SETTINGS, cache_key
from citerag.app.models import AskOptions, Followup, SearchOptions, check_text
from citerag.app.retrieval import Host, open_retriever
from citerag.search import Retriever
from citerag.search.filters import Filters
from citerag.search.retriever import hits_from_rows
from citerag.settings import Settings
from citerag.trace import OPERATION, current_trace_id, hit_attributes, sink, traced_events, tracer
from citerag.trace.setup import caller_attributes, request_attributes
from citerag.types import Answer, Hit, SearchResult, answer_from_dict

log = logging.getLogger("citerag")


def trace_options(settings: Settings) -> dict[str, Any]:
    """What a replay passes again (AskOptions' fields, as this query resolved them)."""
    return {"mode": settings.mode, "k": settings.k, "rerank_model": settings.rerank_model,
            "shortlist": settings.rerank_shortlist, "threshold": settings.threshold,
            "lexical_threshold": settings.lexical_threshold,
            "max_sources": settings.max_sources, "generator": settings.generator}


class Query:
    """One search or question on a collection, under the settings its options resolve to."""

    def __init__(self, host: Host, settings: Settings, filters: Filters | None = None) -> None:
        self.host, self.settings, self.shared = host, settings, host.app
        self.filters = filters or Filters()
        self.timings: dict[str, float] = {}
        self.cache: dict[str, bool] = {}

    @classmethod
    def search(cls, host: Host, query: str, options: SearchOptions | None = None) -> SearchResult:
        check_text(query, "query")
        options = options or SearchOptions()
        self = cls(host, host.settings.with_changes(**options.changes()), options.filters)
        settings = self.settings
        with sink(host.trace_sink(settings, {"question": query}, self.filters.as_json())), \
                tracer.start_as_current_span("citerag.search", attributes=self._operation("search")) as span:
            vector = self._embed(query)
            cached = self._cached_search(query)
            if cached is not None:
                hits, texts = cached
            else:
                with self._retriever(query, vector) as retriever:
                    hits = self._ranked(query, retriever)[:settings.k]
                    texts = retriever.texts({h.document.id for h in hits})
            span.set_attributes(hit_attributes("citerag.hits", hits))
            return SearchResult(hits, cite(hits, texts.__getitem__), self.timings, self.cache,
                                current_trace_id(span))

    @classmethod
    def ask_events(cls, host: Host, question: str, options: AskOptions | None = None,
                   followup: Followup | None = None) -> Iterator[tuple[str, Any]]:
        """A question answered step by step (what a streaming client shows as it happens): ("retrieval", hits),
        ("citation", c)..., ("delta", text)..., ("answer", Answer). A conversation's follow-up passes its
        standalone query as `question` and the rest in `followup`, which the trace records.

        An answer in the answer cache (same collection generation, settings and question) is replayed as the
        same events without retrieving or generating."""
        check_text(question, "question")
        options = options or AskOptions()
        settings = host.settings.with_changes(**options.changes())
        # The gate's cut: the calibrated rule's unless a threshold was set; from here on it is settings.threshold
        # (in the answer cache's key, the trace's options and a replay's), and `rule` says where it came from.
        rule = host.refusal_status(settings)
        if rule.rule == "calibrated":
            settings = settings.with_changes(threshold=rule.threshold, lexical_threshold=rule.lexical_threshold)
        self = cls(host, settings, options.filters)
        self.cache.update(query=False, retrieval=False, answer=False)
        # The question's trace: its span is current while each event is computed (see traced_events).
        # A follow-up's method on the span; the words asked only in the kept texts (where trace_text allows).
        texts = {"question": question, **({"asked": followup.asked} if followup is not None else {})}
        span = tracer.start_span("citerag.ask", attributes={**self._operation("ask"),
                                                           **request_attributes(followup, options)})
        return traced_events(span, self._ask(question, span, texts, rule.rule),
                             host.trace_sink(settings, texts, self.filters.as_json()))

    def _ask(self, question: str, span: Any, texts: dict[str, str], rule: str) -> Iterator[tuple[str, Any]]:
        started = time.perf_counter()
        settings = self.settings
        with tracer.start_as_current_span("citerag.answer_cache") as cached_span:
            replayed = self._cached_answer(question)
            cached_span.set_attribute("citerag.cache.hit", replayed is not None)
        if replayed is not None:
            yield from self._replay(*replayed, started, span, texts)
            return
        with self._retriever(question, self._embed(question)) as retriever:
            generation = retriever.view.generation
            hits = self._ranked(question, retriever)
            kept, best = gate_hits(hits, settings, rule)
            sources = retriever.texts({h.document.id for h in kept})
        span.set_attributes(hit_attributes("citerag.hits", hits))
        yield "retrieval", hits
        # The generator runs after the read has ended: a slow model holds neither the index nor the database.
        for kind, value in answer_events(question, kept, best, self.shared.generator(settings), sources.__getitem__,
                                         settings, self.timings, started, rule):
            if kind == "answer":
                value.cache = self.cache
                value.trace_id = current_trace_id(span)
                texts["answer"] = value.answer
                # On the operation's span (a replay has no cite span): feedback names a source by its [n].
                span.set_attributes({"citerag.refused": value.refused, "citerag.citations.count": len(value.citations)})
                if value.check is not None:
                    self.shared.citation_metrics.record(value.check)
                self._cache_answer(question, generation, hits, value)
            yield kind, value

    def _cached_answer(self, question: str) -> tuple[list[Hit], Answer] | None:
        """The answer cache's entry for the store's generation, its hits read from one view (no search indexes are
        opened); None on a miss, and when the collection changed between reading the generation and the view."""
        settings = self.settings
        if settings.cache_answer_ttl <= 0:
            return None
        generation = self.host.store.generation()
        blob = self.shared.cached("answer", settings.cache_url, self._key("answer", generation, question),
                                  settings.cache_answer_ttl)
        if blob is None:
            return None
        with self.host.store.view() as view:
            if view.generation != generation:
                return None
            data = json.loads(blob)
            return hits_from_rows(view, data["rows"]), answer_from_dict(data["answer"])

    def _replay(self, hits: list[Hit], answer: Answer, started: float, span: Any,
                texts: dict[str, str]) -> Iterator[tuple[str, Any]]:
        self.cache["answer"] = True
        answer.timings = {"total": time.perf_counter() - started}
        answer.cache = self.cache
        answer.trace_id = current_trace_id(span)
        texts["answer"] = answer.answer
        span.set_attributes({"citerag.cache.answer": True, "citerag.refused": answer.refused,
                             "citerag.citations.count": len(answer.citations),
                             **hit_attributes("citerag.hits", hits)})
        yield "retrieval", hits
        for citation in answer.citations:
            yield "citation", citation
        if not answer.refused:
            yield "delta", answer.answer
        yield "answer", answer

    def _embed(self, text: str) -> np.ndarray:
        """The question's vector, embedded (or taken from the cache) before the search lock: a slow encoder holds
        nothing."""
        started = time.perf_counter()
        s = self.settings
        with tracer.start_as_current_span("citerag.embed_query") as span:
            vector = self.shared.query_vector(s.embedding_model, text, s.cache_url, s.cache_query_ttl, self.cache)
            span.set_attributes({"citerag.cache.hit": self.cache.get("query", False),
                                 "citerag.embedding_model": s.embedding_model})
        self.timings["embed"] = time.perf_counter() - started
        return vector

    def _retriever(self, query: str, vector: np.ndarray) -> AbstractContextManager[Retriever]:
        """A retriever that finds the question's vector already embedded (before the search lock)."""
        s = self.settings

        def embed(text: str) -> np.ndarray:
            if text == query:
                return vector
            return self.shared.query_vector(s.embedding_model, text, s.cache_url, s.cache_query_ttl)

        return open_retriever(self.host, embed, self.filters)

    def _ranked(self, query: str, retriever: Retriever) -> list[Hit]:
        """The ranked hits (reranked when the settings say so), from the retrieval cache when it holds them."""
        settings, url = self.settings, self.settings.cache_url
        with tracer.start_as_current_span("citerag.retrieve") as span:
            key = self._key("retrieval", retriever.view.generation, query)
            blob = self.shared.cached("retrieval", url, key, settings.cache_retrieval_ttl)
            self.cache["retrieval"] = blob is not None
            if blob is not None:
                hits = hits_from_rows(retriever.view, json.loads(blob))
            else:
                hits = retrieve(query, retriever, settings, self.shared.reranker(settings.rerank_model),
                                self.timings)
                if settings.cache_retrieval_ttl > 0:
                    rows = [[h.chunk.id, h.rank, h.score, h.cosine_distance, h.exact, h.lexical] for h in hits]
                    self.shared.cache(url).set(key, json.dumps(rows).encode(), settings.cache_retrieval_ttl)
            span.set_attributes({"citerag.cache.hit": blob is not None, "citerag.mode": settings.mode,
                                 "citerag.k": settings.k, "citerag.generation": retriever.view.generation,
                                 **hit_attributes("citerag.hits", hits)})
            return hits

    def _cached_search(self, query: str) -> tuple[list[Hit], dict[int, str]] | None:
        """A search in the retrieval cache, read from one view of the generation it was cached under without the
        search backend's lock or indexes, as a cached answer is (under load, searches queued on that lock); None
        on a miss, which _ranked then looks up and counts."""
        settings = self.settings
        if settings.cache_retrieval_ttl <= 0:
            return None
        generation = self.host.store.generation()
        blob = self.shared.cache(settings.cache_url).get(self._key("retrieval", generation, query))
        if blob is None:
            return None
        with tracer.start_as_current_span("citerag.retrieve") as span, self.host.store.view() as view:
            if view.generation != generation:
                return None
            hits = hits_from_rows(view, json.loads(blob))[:settings.k]
            texts = view.texts({h.document.id for h in hits})
            self.shared.cache_counts[("retrieval", "hit")] += 1
            self.cache["retrieval"] = True
            span.set_attributes({"citerag.cache.hit": True, "citerag.mode": settings.mode, "citerag.k": settings.k,
                                 "citerag.generation": generation, **hit_attributes("citerag.hits", hits)})
        return hits, texts

    def _key(self, level: str, generation: int, text: str) -> str:
        """The cache key of a retrieval or an answer: the store and collection, the generation (bumped by every
        change), the settings that change the result, and the text asked."""
        fields = RETRIEVAL_SETTINGS | (ANSWER_SETTINGS if level == "answer" else set())
        return cache_key(level, {"store": self.settings.store_url, "collection": self.host.name,
                                 "generation": generation, "settings": self.settings.model_dump(include=fields),
                                 "filters": self.filters.key(), "text": text})

    def _cache_answer(self, question: str, generation: int, hits: list[Hit], answer: Answer) -> None:
        """Kept under the generation of the view it was computed from."""
        settings = self.settings
        if settings.cache_answer_ttl <= 0:
            return
        data = {"rows": [[h.chunk.id, h.rank, h.score, h.cosine_distance] for h in hits],
                "answer": {**dataclasses.asdict(answer), "timings": {}, "cache": {}, "trace_id": None}}
        self.shared.cache(settings.cache_url).set(self._key("answer", generation, question),
                                                  json.dumps(data).encode(), settings.cache_answer_ttl)

    def _operation(self, operation: str) -> dict[str, Any]:
        """An operation span's attributes: what it is, where, the options that shape its result, and the caller's
        span when its request sent one (kept in the record, so that an operator can correlate it)."""
        return {OPERATION: operation, "citerag.collection": self.host.name,
                **{f"citerag.options.{k}": v for k, v in trace_options(self.settings).items()},
                **caller_attributes()}

