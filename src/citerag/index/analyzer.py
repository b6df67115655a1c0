"""How a text becomes the terms of the lexical index (BM25) and the words of the exact-words matcher.

Two analyzers, chosen by the setting `lexical`:

- "reference": runs of [a-z0-9] in the lower-cased text (citerag.text.tokenize), the published reference's rule
  and its BM25 scores to the last bit; "Größe" becomes "gr", "e".
- "stemmed": Unicode words of the NFKC-normalised, case-folded text, each stemmed with the Snowball stemmer of
  the text's language (PyStemmer). "Größe", "Grösse" and "Größen" all become "gross".

Words are runs of letters and digits (`[^\\W_]+`): underscores and hyphens separate words, as in the reference,
so "max_connections" and "apt-get" match "connections" and "apt" on their own, and a pasted identifier is still
a contiguous run of the same words. Digits stay inside their word ("eth0", "ipv6") and such words are not
stemmed: they are names, not inflected forms. Case folding maps "ß" to "ss", so both spellings meet.

Languages: a chunk's language is detected per chunk at index time (citerag.lang.detect, a few milliseconds), which
is right for a German manual with untranslated English paragraphs; a caller that knows it passes it. A query's
language is detected from the query; a query too short to tell (a word or two) takes the `fallback` the index
gives, the language most of its chunks are in, so "Größe" alone over a German collection is stemmed as German.

The exact-words matcher uses the same words unstemmed (`words`): "exact" stays verbatim, only now Unicode-aware.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from typing import Any

import Stemmer

from citerag.lang import DEFAULT, detect, stemmer_name
from citerag.text import tokenize as reference_tokenize

ANALYZERS = ("reference", "stemmed")
_WORD = re.compile(r"[^\W_]+")
_DIGIT = re.compile(r"\d")
_local = threading.local()  # PyStemmer's stemmers keep a cache and are not safe to share between threads


def _stemmer(language: str) -> Any:
    cache: dict[str, Any] = getattr(_local, "stemmers", None) or {}
    _local.stemmers = cache
    if language not in cache:
        name = stemmer_name(language)
        cache[language] = Stemmer.Stemmer(name) if name else None
    return cache[language]


def unicode_words(text: str) -> list[str]:
    """Letter-and-digit runs of the NFKC-normalised, case-folded text."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def stem(words: list[str], language: str) -> list[str]:
    """The words stemmed for `language` (unchanged where it has no Snowball stemmer); words with digits as they are."""
    stemmer = _stemmer(language)
    if stemmer is None:
        return words
    return [w if _DIGIT.search(w) else stemmer.stemWord(w) for w in words]


@dataclass(frozen=True)
class Analyzer:
    """One tokenisation, named as the index stamps it."""

    name: str = "reference"

    def __post_init__(self) -> None:
        if self.name not in ANALYZERS:
            raise ValueError(f"lexical analyzer must be one of {ANALYZERS}, not {self.name!r}")

    @property
    def stemmed(self) -> bool:
        return self.name == "stemmed"

    def language(self, text: str, fallback: str = DEFAULT) -> str | None:
        """The language the text is stemmed in (None for the reference analyzer, which has none)."""
        return detect(text, default=fallback) if self.stemmed else None

    def terms(self, text: str, language: str | None = None, fallback: str = DEFAULT) -> list[str]:
        """The index terms of a text (chunk or query), in order, repeats kept; `language` when the caller knows
        it, else detected (`fallback` when the text is too short to tell)."""
        if not self.stemmed:
            return reference_tokenize(text)
        return stem(unicode_words(text), language or detect(text, default=fallback))

    def words(self, text: str) -> list[str]:
        """The words the exact-words matcher compares: the index's words, unstemmed."""
        return unicode_words(text) if self.stemmed else reference_tokenize(text)


REFERENCE = Analyzer("reference")
