"""Question to answer: retrieve, gate, cite, generate; refuse without calling a model."""

from __future__ import annotations

from collections.abc import Callable

from citerag.answer.citations import cite
from citerag.answer.generators.base import Generator
from citerag.answer.prompt import build_prompt
from citerag.search import Retriever, gate
from citerag.types import Answer


def refusal(question: str, threshold: float) -> str:
    return f'NO ANSWER: nothing under cosine distance {threshold:g} for "{question}"'


def answer_question(question: str, retriever: Retriever, generator: Generator, canonical_text: Callable[[int], str],
                    *, threshold: float, max_sources: int = 4, mode: str = "dense", k: int = 20) -> Answer:
    kept = gate(retriever.search(question, mode=mode, k=k), threshold, max_sources)
    if not kept:
        return Answer(question, True, refusal(question, threshold), [])
    citations = cite(kept, canonical_text)
    prompt = build_prompt(question, citations)
    text = generator.generate(question, citations, prompt)
    return Answer(question, False, text, citations, prompt)
