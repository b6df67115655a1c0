"""The signals a refusal rule reads from one question's retrieval: cheap, computed from what the search already has.

- best: the smallest cosine distance among the hits (what the old single cut reads);
- margin: the second smallest minus the smallest (a question about one thing has one clearly closest chunk);
- spread: the mean of the four smallest minus the smallest;
- absent: the share of the question's content words (not stopwords, 3+ characters) that occur in no chunk of the
  collection (a question about Kubernetes asked of a Debian manual names words the manual never uses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from citerag.refusal.synthetic import STOPWORDS
from citerag.text import tokenize

FEATURES = ("best", "margin", "spread", "absent")
# Document frequency of each word in the collection (0 = the collection never uses it).
Vocabulary = Callable[[Sequence[str]], dict[str, int]]


@dataclass(frozen=True)
class Signals:
    best: float
    margin: float
    spread: float
    absent: float
    content_words: int

    def vector(self, names: Sequence[str]) -> list[float]:
        return [float(getattr(self, n)) for n in names]

    def as_json(self) -> dict[str, float]:
        return {n: round(float(getattr(self, n)), 6) for n in FEATURES}


def content_words(question: str) -> list[str]:
    """The question's distinct BM25 tokens less stopwords and tokens under 3 characters, in order."""
    return list(dict.fromkeys(w for w in tokenize(question) if len(w) >= 3 and w not in STOPWORDS))


def signals(question: str, distances: Iterable[float], vocabulary: Vocabulary | None) -> Signals:
    """The signals of one question from its hits' cosine distances (any order) and the collection's vocabulary
    (None: `absent` is 0, as if every word occurred)."""
    d = sorted(float(x) for x in distances)
    if not d:
        return Signals(2.0, 0.0, 0.0, 1.0, 0)
    best = d[0]
    margin = (d[1] - best) if len(d) > 1 else 0.0
    spread = (sum(d[:4]) / len(d[:4])) - best
    words = content_words(question)
    absent = 0.0
    if vocabulary is not None and words:
        df = vocabulary(words)
        absent = sum(df.get(w, 0) == 0 for w in words) / len(words)
    return Signals(best, margin, spread, absent, len(words))
