"""The default ranking (mode `adaptive`): cosine plus BM25 weighed by the lexical evidence the question holds.

    score = cosine(question, chunk) + weight × BM25(question, chunk) / mass(question)

`mass` is the sum of the idf of the question's terms, a term the collection never uses counted at df = 0
(LexicalIndex.query_mass): about what a chunk of average length holding each term once would score. BM25 / mass
is the share of the question's lexical evidence one chunk holds, near 1 when its rare words, names and numbers
all stand together in that chunk, small when they are common, scattered or absent. A fixed mode cannot do this:
BM25 wins where questions copy the document's rare words (XQuAD's crowd-written questions, German compounds)
and loses where they paraphrase (support tickets), and a German question over English text would have its
scattered lexical matches count as if they meant something; here its German words are absent, the mass is
large, and BM25 hardly moves the dense ranking.

Chosen leave-one-set-out on the eight dev sets (docs/quality.md): weight 0.3 in seven folds of eight (0.4 in the
other). Fusing ranks (RRF) or BM25 relative to the question's best BM25 score (which is always 1, however weak)
lost on the paraphrasing and cross-lingual sets; both are measured there. Chunks holding the question's words verbatim
(search/phrase.py) still come first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

LEXICAL_WEIGHT = 0.3


def evidence(lexical_ids: np.ndarray, lexical_scores: np.ndarray, mass: float) -> dict[int, float]:
    """Each lexically matched chunk's share of the question's lexical evidence (BM25 / mass)."""
    if mass <= 0:
        return {}
    return {int(i): float(s) / mass for i, s in zip(lexical_ids.tolist(), lexical_scores.tolist(), strict=True)}


def fused_order(dense_ids: np.ndarray, lexical: dict[int, float], similarity: Callable[[np.ndarray], np.ndarray],
                weight: float, first: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The candidates (dense's and BM25's) ranked by cosine + weight × evidence, `first` ahead of all in their
    order: (chunk ids, scores), best first, ties in candidate order (dense's first)."""
    candidates = np.array(list(dict.fromkeys([*dense_ids.tolist(), *lexical, *first])), dtype=np.int64)
    if not len(candidates):
        return candidates, np.zeros(0, dtype=np.float64)
    score = similarity(candidates) + weight * np.array([lexical.get(int(i), 0.0) for i in candidates])
    order = np.argsort(-score, kind="stable")
    ids, scores = candidates[order], score[order]
    if first:  # moved ahead, keeping the scores they were given
        ahead = set(first)
        keep = np.array([i not in ahead for i in ids.tolist()], dtype=bool)
        by_id = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        top = np.array(list(first), dtype=np.int64)
        ids = np.concatenate([top, ids[keep]])
        scores = np.concatenate([np.array([by_id[int(i)] for i in top]), scores[keep]])
    return ids, scores
