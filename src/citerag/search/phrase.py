"""Exact words: when a query's tokens occur verbatim, in order, in a few chunks, those chunks are the answer.

A user who pastes a phrase, an error message or an identifier from a document expects that passage first, and
dense retrieval ranks such a passage anywhere (a verbatim sentence of a two-column paper sat at cosine distance
0.94 from its own chunk). A contiguous run of the query's BM25 tokens in a chunk is decisive lexical evidence,
unlike a high BM25 score, which common words reach too; but only while it singles out a few passages: a
phrase found in more than `max_matches` of the lexical shortlist ("the", "apt install") decides nothing.
A natural-language question never occurs verbatim, so questions are ranked by the adaptive score alone
(search/fusion.py).

Words are the lexical index's analyzer's `words`: the reference's [a-z0-9]+ tokens, or, with the stemmed
tokenisation, Unicode words (case-folded, NFKC) left unstemmed, so "Größe" is one word and is matched as written:
exact words stay verbatim, not "the same stems in order".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from citerag.index.analyzer import REFERENCE, Analyzer

MAX_MATCHES = 8  # chunks a phrase may occur in and still be decisive
SHORTLIST = 50  # BM25 hits checked for the phrase


def contains_run(haystack: Sequence[str], needle: Sequence[str]) -> bool:
    """Whether `needle` occurs as a contiguous run of `haystack`."""
    n = len(needle)
    if not n or n > len(haystack):
        return False
    first = needle[0]
    return any(haystack[i] == first and list(haystack[i:i + n]) == list(needle)
               for i in range(len(haystack) - n + 1))


def exact_matches(query: str, candidates: Iterable[int], contents: Mapping[int, str],
                  max_matches: int = MAX_MATCHES, analyzer: Analyzer = REFERENCE) -> list[int]:
    """The candidates (in their order) whose content holds the query's tokens verbatim and in order; empty when
    the query has no tokens or the phrase is too common to decide (more than `max_matches` matches)."""
    words = analyzer.words(query)
    if not words:
        return []
    found = [i for i in candidates if contains_run(analyzer.words(contents[i]), words)]
    return found if len(found) <= max_matches else []
