"""Synthetic in-domain questions made from a collection's own chunks: the positives of the calibration.

A copied sentence sits far closer to its chunk than a real question does, so each question is degraded the way
people ask: a section heading turned into "How do I ...?", or a sentence cut to a few of its words, some dropped,
the rest partly reordered, behind a question stem. Seeded: the same chunks give the same questions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from citerag.types import StoredChunk

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.+/-]*[A-Za-z0-9]|[A-Za-z]")
_NUMBERING = re.compile(r"^\s*(?:[0-9A-Z]{1,3}\.)+(?:[0-9]+\.?)*\s*")  # "1.2.3. ", "A.1. "
_STOP_TEXT = """a an and are as at be been but by can could do does for from has have how i if in into is it
its may me my not of on or our should so than that the their then there these they this to was we were what when
where which while who why will with would you your"""
STOPWORDS = frozenset(_STOP_TEXT.split())
_STEMS = ("How do I {}?", "What is {}?", "How can I {}?", "Why {}?", "What about {}?", "{}?")
_HEADING_STEMS = ("How do I handle {}?", "What should I know about {}?", "Where is {} explained?",
                  "How does {} work?", "{}: how?")


@dataclass(frozen=True)
class SyntheticQuestion:
    query: str
    chunk_id: int  # the chunk it was made from
    kind: str  # "heading" | "sentence"


def _sentences(content: str) -> list[str]:
    return [s for s in _SENTENCE.split(" ".join(content.split())) if 6 <= len(s.split()) <= 45]


def _degrade(sentence: str, rng: random.Random) -> str | None:
    """A handful of the sentence's words: stopwords mostly gone, about a third of the content words dropped, one
    neighbouring pair swapped; None when too little is left to be a question."""
    words = _WORD.findall(sentence)
    content = [w for w in words if w.lower() not in STOPWORDS]
    if len(content) < 3:
        return None
    kept = [w for w in content if rng.random() > 0.35][:8]
    if len(kept) < 3:
        kept = content[:3]
    if len(kept) > 3:
        i = rng.randrange(len(kept) - 1)
        kept[i], kept[i + 1] = kept[i + 1], kept[i]
    return rng.choice(_STEMS).format(" ".join(kept).lower())


def synthetic_questions(chunks: Sequence[StoredChunk], n: int = 200, seed: int = 13) -> list[SyntheticQuestion]:
    """Up to `n` questions from a seeded sample of `chunks`: one in four from a section heading, the rest from a
    sentence of the chunk's own text (never its contextual header). A small collection's chunks are visited
    again (other sentences, other words dropped) until `n` are made or 4 n tries are spent."""
    rng = random.Random(seed)
    pool = list(chunks)
    rng.shuffle(pool)
    out: list[SyntheticQuestion] = []
    seen: set[str] = set()
    for attempt in range(4 * n):
        if len(out) >= n or not pool:
            break
        chunk = pool[attempt % len(pool)]
        query: str | None = None
        heading = _NUMBERING.sub("", chunk.section).strip()
        if heading and len(heading.split()) >= 2 and rng.random() < 0.25:
            query = rng.choice(_HEADING_STEMS).format(heading.lower())
            kind = "heading"
        else:
            sentences = _sentences(chunk.content)
            if sentences:
                query = _degrade(rng.choice(sentences), rng)
            kind = "sentence"
        if query and query not in seen:
            seen.add(query)
            out.append(SyntheticQuestion(query, chunk.id, kind))
    return out
