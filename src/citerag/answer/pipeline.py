"""Question to answer: retrieve, rerank (optional), gate, cite, generate, check; refuse without calling a model."""

from __future__ import annotations

import time
from collections.abc import Callable

from citerag.answer.check import check_citations
from citerag.answer.citations import cite
from citerag.answer.generators.base import Generator
from citerag.answer.prompt import build_prompt
from citerag.search import Retriever, gate
from citerag.search.rerank import DEFAULT_SHORTLIST, Reranker, rerank
from citerag.types import Answer, Hit


def refusal(question: str, threshold: float) -> str:
    return f'NO ANSWER: nothing under cosine distance {threshold:g} for "{question}"'


def retrieve(question: str, retriever: Retriever, *, mode: str = "dense", k: int = 20,
             reranker: Reranker | None = None, shortlist: int = DEFAULT_SHORTLIST,
             timings: dict[str, float] | None = None) -> list[Hit]:
    """The ranked hits the gate sees: the retriever's, or its first `shortlist` reranked by the cross-encoder."""
    t0 = time.perf_counter()
    hits = retriever.search(question, mode=mode, k=max(k, shortlist) if reranker is not None else k)
    t1 = time.perf_counter()
    if timings is not None:
        timings["retrieve"] = t1 - t0
    if reranker is None:
        return hits
    hits = rerank(question, hits, reranker, shortlist)
    if timings is not None:
        timings["rerank"] = time.perf_counter() - t1
    return hits


def answer_question(question: str, retriever: Retriever, generator: Generator, canonical_text: Callable[[int], str],
                    *, threshold: float, max_sources: int = 4, mode: str = "dense", k: int = 20,
                    reranker: Reranker | None = None, shortlist: int = DEFAULT_SHORTLIST) -> Answer:
    timings: dict[str, float] = {}
    start = time.perf_counter()
    hits = retrieve(question, retriever, mode=mode, k=k, reranker=reranker, shortlist=shortlist, timings=timings)
    kept = gate(hits, threshold, max_sources)
    if not kept:
        timings["total"] = time.perf_counter() - start
        return Answer(question, True, refusal(question, threshold), [], timings=timings)
    citations = cite(kept, canonical_text)
    prompt = build_prompt(question, citations)
    t0 = time.perf_counter()
    raw = generator.generate(question, citations, prompt)
    timings["generate"] = time.perf_counter() - t0
    # The model may only write [n] for a source it was given: anything else is removed and reported.
    text, check = check_citations(raw, len(citations))
    timings["total"] = time.perf_counter() - start
    return Answer(question, False, text, citations, prompt, check=check, generator=generator.name, timings=timings)
