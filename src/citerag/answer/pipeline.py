"""Question to answer: retrieve, rerank (optional), gate, cite, generate, check; refuse without calling a model."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from citerag import lang
from citerag.answer.check import CheckedStream, check_citations
from citerag.answer.citations import cite
from citerag.answer.generators.base import Generator
from citerag.answer.messages import refusal_text
from citerag.answer.prompt import build_prompt
from citerag.search import Retriever, gate
from citerag.search.rerank import Reranker, rerank
from citerag.settings import Settings
from citerag.trace import hit_attributes, tracer
from citerag.types import Answer, Hit


def refusal(question: str, threshold: float, rule: str = "threshold") -> str:
    """The refusal's text: "NO ANSWER: " (in every language, clients parse it), then in the question's language
    the cut, and which rule set it when it was the collection's calibrated one."""
    return refusal_text(question, threshold, rule)


def retrieve(question: str, retriever: Retriever, settings: Settings, reranker: Reranker | None = None,
             timings: dict[str, float] | None = None) -> list[Hit]:
    """The ranked hits the gate sees: the retriever's first `k` (settings.mode), or its first
    `rerank_shortlist` reordered by the cross-encoder."""
    t0 = time.perf_counter()
    k = max(settings.k, settings.rerank_shortlist) if reranker is not None else settings.k
    with tracer.start_as_current_span("citerag.retriever") as span:
        hits = retriever.search(question, mode=settings.mode, k=k)
        span.set_attributes({"citerag.mode": settings.mode, "citerag.k": k, **hit_attributes("citerag.hits", hits)})
    t1 = time.perf_counter()
    if timings is not None:
        timings["retrieve"] = t1 - t0
    if reranker is None:
        return hits
    with tracer.start_as_current_span("citerag.rerank") as span:
        hits = rerank(question, hits, reranker, settings.rerank_shortlist)
        span.set_attributes({"citerag.rerank.model": settings.rerank_model,
                             "citerag.rerank.shortlist": settings.rerank_shortlist,
                             **hit_attributes("citerag.hits", hits)})
    if timings is not None:
        timings["rerank"] = time.perf_counter() - t1
    return hits


def gate_hits(hits: list[Hit], settings: Settings, rule: str = "threshold") -> tuple[list[Hit], float | None]:
    """The hits that may be cited (the distance gate, citerag.search.gate) and the best distance of all ranked
    hits; empty means NO ANSWER. `rule` names where settings.threshold came from, for the trace."""
    with tracer.start_as_current_span("citerag.gate") as span:
        best = min((h.cosine_distance for h in hits), default=None)
        kept = gate(hits, settings.threshold, settings.max_sources, settings.lexical_threshold or None)
        span.set_attributes({"citerag.gate.threshold": settings.threshold, "citerag.gate.rule": rule,
                             "citerag.gate.lexical_threshold": settings.lexical_threshold,
                             "citerag.gate.max_sources":
                             settings.max_sources, "citerag.gate.decision": "answered" if kept else "refused",
                             "citerag.gate.kept": len(kept), **hit_attributes("citerag.hits", kept)})
        if best is not None:
            span.set_attribute("citerag.gate.best_distance", round(float(best), 6))
    return kept, best


def answer_events(question: str, kept: list[Hit], best: float | None, generator: Generator,
                  canonical_text: Callable[[int], str], settings: Settings, timings: dict[str, float] | None = None,
                  started: float | None = None, rule: str = "threshold") -> Iterator[tuple[str, Any]]:
    """Cite the hits the gate kept (gate_hits), generate and check; refuse without calling a model when it kept
    none.

    Yields ("citation", Citation) for each source, ("delta", text) as the generator writes (one delta for a
    generator that does not stream), and last ("answer", Answer): the checked answer or the refusal. Deltas are
    the model's raw text; only the final answer has its citations checked. `started` is when the question arrived
    (perf_counter), so that timings["total"] includes retrieval. `rule` names where settings.threshold came from
    ("calibrated" or "threshold"), for the refusal."""
    timings = {} if timings is None else timings
    start = time.perf_counter() if started is None else started
    if not kept:
        timings["total"] = time.perf_counter() - start
        yield "answer", Answer(question, True, refusal(question, settings.threshold, rule), [], timings=timings,
                               best_distance=best, threshold=settings.threshold)
        return
    with tracer.start_as_current_span("citerag.cite") as span:
        citations = cite(kept, canonical_text)
        span.set_attributes({"citerag.citations.count": len(citations),
                             "citerag.citations.document_ids": [c.document_id for c in citations]})
    for citation in citations:
        yield "citation", citation
    prompt = build_prompt(question, citations)
    t0 = time.perf_counter()
    stream = getattr(generator, "stream_text", None)
    parts: list[str] = []
    # Not made current: the span stays open across the yields. Sizes in characters; tokens too where the model
    # reports them (not in a stream).
    # Deltas carry the checked text only (CheckedStream): a link or an invented [n] is never sent, not even
    # before the final answer replaces it.
    checked = CheckedStream(len(citations))
    with tracer.start_span("citerag.generate") as span:
        span.set_attributes({"citerag.generator": generator.name, "citerag.generate.prompt_chars": len(prompt)})
        if callable(stream) and getattr(generator, "stream", False):
            for delta in stream(prompt):
                parts.append(delta)
                if safe := checked.feed(delta):
                    yield "delta", safe
            raw = "".join(parts).strip()
        else:
            raw = generator.generate(question, citations, prompt)
        span.set_attribute("citerag.generate.output_chars", len(raw))
        usage = priced_usage(generator, settings)
        if usage is not None:  # what an LLM reported it read and wrote, priced where settings.token_prices say
            span.set_attributes({f"citerag.generate.{k}": v for k, v in usage.items() if v is not None})
    timings["generate"] = time.perf_counter() - t0
    # The model may only write [n] for a source it was given: anything else is removed and reported.
    with tracer.start_as_current_span("citerag.check") as span:
        # Sentences are split in the answer's own language, so "z. B." in a German answer ends no sentence.
        text, check = check_citations(raw, len(citations), lang.detect(raw))
        if rest := checked.finish(text):
            yield "delta", rest
        span.set_attributes({"citerag.check.valid_markers": check.valid_markers,
                             "citerag.check.invalid_markers": check.invalid, "citerag.check.cited": check.cited,
                             "citerag.check.unused": check.unused, "citerag.check.flagged": check.flagged})
    timings["total"] = time.perf_counter() - start
    yield "answer", Answer(question, False, text, citations, prompt, check=check, generator=generator.name,
                           timings=timings, best_distance=best, threshold=settings.threshold, usage=usage)


def priced_usage(generator: Generator, settings: Settings) -> dict[str, Any] | None:
    """The tokens the model reported for this thread's last call, and their cost at the configured price of its
    model (openai_model, or the GGUF file's name); None when it reported none (the extractive generator, a
    stream)."""
    tokens = getattr(getattr(generator, "usage", None), "tokens", None)
    if tokens is None:
        return None
    model = str(getattr(generator, "model", "") or Path(str(getattr(generator, "model_path", ""))).name)
    price = settings.token_prices.get(model)
    cost = None if price is None else round((tokens[0] * price[0] + tokens[1] * price[1]) / 1000, 8)
    return {"model": model, "prompt_tokens": tokens[0], "completion_tokens": tokens[1], "cost": cost}

