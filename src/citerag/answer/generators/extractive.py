"""Extractive answers: the cited chunks' most relevant sentences, each marked [n], quoted in their own language.
No LLM."""

from __future__ import annotations

import re

import numpy as np

from citerag.answer.messages import message, question_language
from citerag.embed import Encoder
from citerag.types import Citation

_SENTENCE = re.compile(r"[^.!?]+(?:[.!?]+|$)")
_SPACE = re.compile(r"\s+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")


def _lines(text: str) -> list[str]:
    """Paragraphs with their line wraps undone; a table's rows (cells joined by " | ") stay lines of their own."""
    out: list[str] = []
    for para in _PARAGRAPH_BREAK.split(text):
        out.extend(para.split("\n") if " | " in para else [para])
    return out


def sentences(text: str) -> list[str]:
    out = [_SPACE.sub(" ", m.group()).strip() for line in _lines(text) for m in _SENTENCE.finditer(line)]
    # Fragments ("See systemd.", table cells) answer nothing: keep sentences of four words or more.
    return [s for s in out if len(s.split()) >= 4 and re.search(r"[A-Za-z]", s)]


class ExtractiveGenerator:
    name = "extractive"

    def __init__(self, encoder: Encoder, max_sentences: int = 3) -> None:
        self.encoder = encoder
        self.max_sentences = max_sentences

    def generate(self, question: str, sources: list[Citation], prompt: str) -> str:
        candidates = [(c.index, pos, s) for c in sources for pos, s in enumerate(sentences(c.quote))]
        if not candidates:
            # The only words of an extractive answer that are not quoted: in the question's language.
            return message("no_sentence", question_language(question)) + " " + \
                " ".join(f"[{c.index}]" for c in sources)
        vectors = self.encoder.encode([question] + [s for _, _, s in candidates])
        scores = vectors[1:] @ vectors[0]
        best = sorted(np.argsort(-scores)[: self.max_sentences],
                      key=lambda i: (candidates[i][0], candidates[i][1]))
        return " ".join(f"{candidates[i][2]} [{candidates[i][0]}]" for i in best)
