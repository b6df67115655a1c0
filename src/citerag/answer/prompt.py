"""The prompt: numbered sources, cite as [n], admit when the sources do not answer."""

from __future__ import annotations

from citerag.types import Citation

INSTRUCTIONS = (
    "Answer the question using only the numbered sources below.\n"
    "Cite every claim as [n], where n is the number of the source that supports it. "
    "Write no links and no source names: only [n].\n"
    "If the sources do not contain the answer, say so.\n"
    "Answer in the language the question is written in."
)


def build_prompt(question: str, citations: list[Citation]) -> str:
    sources = "\n\n".join(f"[{c.index}] {c.document_name} > {c.locator_label}\n{c.quote}" for c in citations)
    return f"{INSTRUCTIONS}\n\nSources:\n\n{sources}\n\nQuestion: {question}\nAnswer:"
