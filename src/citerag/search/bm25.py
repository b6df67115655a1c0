"""BM25 exactly as the reference: k1 = 1.2, b = 0.75, tokens [a-z0-9]+ of the lower-cased text,
idf = ln(1 + (N - n + 0.5) / (n + 0.5)). Scores equal reference/bm25.ts to 1e-9.

Written here rather than taken from bm25s/rank_bm25 because those tokenise and weight differently,
and conformance to the published scores is the contract. Postings are numpy arrays per term.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import idf_mass
from citerag.text import tokenize

__all__ = ["BM25", "tokenize"]


class BM25:
    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75, analyzer: Analyzer = REFERENCE) -> None:
        """`analyzer`: the reference's tokens (the conformance contract) unless another is given."""
        self.k1, self.b = k1, b
        self.analyzer = analyzer
        self.n_docs = len(docs)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        lengths = np.zeros(len(docs), dtype=np.float64)
        for i, doc in enumerate(docs):
            words = analyzer.terms(doc)
            lengths[i] = len(words)
            for word, count in Counter(words).items():
                ids, tfs = postings.setdefault(word, ([], []))
                ids.append(i)
                tfs.append(count)
        self.avg = float(lengths.sum() / len(docs)) if docs else 0.0
        self._postings: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for word, (ids, tfs) in postings.items():
            df = len(ids)
            idf = math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5))
            f = np.asarray(tfs, dtype=np.float64)
            length = lengths[ids]
            # Same operation order as the reference, so the floating-point result is the same.
            weight = idf * (f * (k1 + 1)) / (f + k1 * (1 - b + (b * length) / self.avg))
            self._postings[word] = (np.asarray(ids, dtype=np.int64), weight)

    def query_mass(self, query: str) -> float:
        """The reference's side of LexicalIndex.query_mass: Σ idf of the query's terms, absent ones at df = 0."""
        terms = self.analyzer.terms(query)
        return idf_mass(self.n_docs, {t: len(self._postings[t][0]) for t in set(terms) if t in self._postings}, terms)

    def scores(self, query: str) -> np.ndarray:
        out = np.zeros(self.n_docs, dtype=np.float64)
        for word in self.analyzer.terms(query):  # a repeated query word counts again, as in the reference
            hit = self._postings.get(word)
            if hit is not None:
                out[hit[0]] += hit[1]
        return out
