"""Synthetic in-domain questions made from a collection's own chunks: the positives of the calibration.

A copied sentence sits far closer to its chunk than a real question does, so each question is degraded the way
people ask: a section heading turned into "How do I ...?", or a sentence cut to a few of its words, some dropped,
the rest partly reordered, behind a question stem. The stems, stopwords and word pattern are those of the chunk's
language (detected per chunk, or passed in), English where none is written. Seeded: the same chunks give the same
questions.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from citerag.lang import DEFAULT, detect
from citerag.types import StoredChunk

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_NUMBERING = re.compile(r"^\s*(?:[0-9A-Z]{1,3}\.)+(?:[0-9]+\.?)*\s*")  # "1.2.3. ", "A.1. "


@dataclass(frozen=True)
class Phrasing:
    """How questions are put in one language."""

    stems: tuple[str, ...]  # around a handful of a sentence's words
    heading_stems: tuple[str, ...]  # around a section heading
    stopwords: frozenset[str]
    word: re.Pattern[str]
    lower: bool  # lower-case the words (English questions are typed so; German nouns keep their capital)


_EN_STOP = """a an and are as at be been but by can could do does for from has have how i if in into is it
its may me my not of on or our should so than that the their then there these they this to was we were what when
where which while who why will with would you your"""
_DE_STOP = """aber alle als also am an auch auf aus bei beim bis bzw da damit dann das dass dem den denn der des
dessen die dies diese diesem diesen dieser dieses doch du durch ein eine einem einen einer eines er es etwa für
gegen hat hatte haben ich ihr ihre im in ist ja jede jeder jedes kann kein keine können man mehr mit muss nach
nicht noch nur ob oder ohne sehr sein seine sich sie sind so soll sollte über um und uns unter vom von vor war
waren was weil wenn werden wie wir wird wo wurde wurden zu zum zur zwischen"""
STOPWORDS = frozenset(_EN_STOP.split())  # English: also the `absent` signal's (features.py)
PHRASINGS = {
    # ASCII words as before, so English questions (and the English cut) stay as they were.
    "en": Phrasing(("How do I {}?", "What is {}?", "How can I {}?", "Why {}?", "What about {}?", "{}?"),
                   ("How do I handle {}?", "What should I know about {}?", "Where is {} explained?",
                    "How does {} work?", "{}: how?"),
                   STOPWORDS, re.compile(r"[A-Za-z][A-Za-z0-9_.+/-]*[A-Za-z0-9]|[A-Za-z]"), lower=True),
    "de": Phrasing(("Wie kann ich {}?", "Was ist {}?", "Wie {}?", "Warum {}?", "Was ist mit {}?", "{}?"),
                   ("Wie gehe ich mit {} um?", "Was sollte ich über {} wissen?", "Wo wird {} erklärt?",
                    "Wie funktioniert {}?", "{}: wie?"),
                   frozenset(_DE_STOP.split()), re.compile(r"[^\W\d_][\w.+/-]*[^\W_]|[^\W\d_]"), lower=False),
}


def phrasing(language: str) -> Phrasing:
    """The phrasing of `language`, English where none is written."""
    return PHRASINGS.get(language, PHRASINGS[DEFAULT])


@dataclass(frozen=True)
class SyntheticQuestion:
    query: str
    chunk_id: int  # the chunk it was made from
    kind: str  # "heading" | "sentence"
    language: str = DEFAULT  # the phrasing used


def _sentences(content: str) -> list[str]:
    return [s for s in _SENTENCE.split(" ".join(content.split())) if 6 <= len(s.split()) <= 45]


def _degrade(sentence: str, rng: random.Random, how: Phrasing) -> str | None:
    """A handful of the sentence's words: stopwords mostly gone, about a third of the content words dropped, one
    neighbouring pair swapped; None when too little is left to be a question."""
    words = how.word.findall(sentence)
    content = [w for w in words if w.lower() not in how.stopwords]
    if len(content) < 3:
        return None
    kept = [w for w in content if rng.random() > 0.35][:8]
    if len(kept) < 3:
        kept = content[:3]
    if len(kept) > 3:
        i = rng.randrange(len(kept) - 1)
        kept[i], kept[i + 1] = kept[i + 1], kept[i]
    text = " ".join(kept)
    return rng.choice(how.stems).format(text.lower() if how.lower else text)


def synthetic_questions(chunks: Sequence[StoredChunk], n: int = 200, seed: int = 13,
                        language: str | None = None) -> list[SyntheticQuestion]:
    """Up to `n` questions from a seeded sample of `chunks`: one in four from a section heading, the rest from a
    sentence of the chunk's own text (never its contextual header), phrased in `language`, or when None in each
    chunk's detected language. A small collection's chunks are visited again (other sentences, other words
    dropped) until `n` are made or 4 n tries are spent."""
    rng = random.Random(seed)
    pool = list(chunks)
    rng.shuffle(pool)
    out: list[SyntheticQuestion] = []
    seen: set[str] = set()
    languages: dict[int, str] = {}
    for attempt in range(4 * n):
        if len(out) >= n or not pool:
            break
        chunk = pool[attempt % len(pool)]
        code = language or languages.setdefault(chunk.id, detect(chunk.content))
        code = code if code in PHRASINGS else DEFAULT
        how = PHRASINGS[code]
        query: str | None = None
        heading = _NUMBERING.sub("", chunk.section).strip()
        if heading and len(heading.split()) >= 2 and rng.random() < 0.25:
            query = rng.choice(how.heading_stems).format(heading.lower() if how.lower else heading)
            kind = "heading"
        else:
            sentences = _sentences(chunk.content)
            if sentences:
                query = _degrade(rng.choice(sentences), rng, how)
            kind = "sentence"
        if query and query not in seen:
            seen.add(query)
            out.append(SyntheticQuestion(query, chunk.id, kind, code))
    return out
