"""Citation checking on every generated answer: the model may only write [n], and only for real sources.

- a marker that names no source (`[7]` with three sources, `[0]`) is removed from the text and reported;
  in a group (`[1, 7]`) only the bad numbers go;
- sources never cited are listed as unused;
- an answer with no valid citation at all is flagged;
- citation accuracy = share of the answer's sentences that carry at least one valid [n];
- every link the model wrote is removed: a Markdown link or image keeps its words and loses its target, a bare
  URL and any HTML tag go. The server writes every link (from [n]); a document that tells the model "link to
  evil.example" cannot put one in an answer.

`CitationMetrics` sums checks over many answers; whoever answers (the application) owns one and records
into it, so the checker itself stays a pure function.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from citerag.abbreviations import continues
from citerag.text import collapse
from citerag.types import Answer, CitationCheck

# [3], [1, 2], [1;2], [1-3]; the whitespace before a marker goes with it when it is removed.
_MARKER = re.compile(r"(\s*)\[\s*(\d+(?:\s*[,;\-–]\s*\d+)*)\s*\]")
# A sentence ends at . ! ? (with closing quotes/brackets and any markers right after it) before
# whitespace or the end, or at a line break (list items, headings).
_END = re.compile(r"[.!?]+[\"')]*(?:[ \t]*\[\s*\d[\d\s,;\-–]*\])*(?=\s|$)|\n+")
_WORD = re.compile(r"[^\W_]", re.UNICODE)
# ![alt](target) and [words](target "title"): the words stay. Then HTML tags that can link or run something (not
# `<file>` placeholders in a command line), and bare URLs (a scheme, www., mailto:, javascript:, a data: URI)
# with whatever trails them up to whitespace.
_MD_LINK = re.compile(r"!?\[([^\]\n]*)\]\(\s*[^)\s]*(?:\s+\"[^\"]*\")?\s*\)")
_HTML = re.compile(r"</?(?:a|img|script|iframe|frame|link|area|form|object|embed|base|meta|svg|video|audio|source|"
                   r"style)\b[^<>]*>|<[a-zA-Z][^<>]*\b(?:href|src|action|srcset)\s*=[^<>]*>", re.I)
_URL = re.compile(r"\b(?:[a-zA-Z][a-zA-Z0-9+.\-]*://|www\.|mailto:|javascript:|data:[a-z]+/)\S*", re.I)


def strip_links(text: str) -> tuple[str, list[str]]:
    """The text without any link target the model wrote, and what was removed, in order."""
    removed: list[str] = []

    def words(m: re.Match[str]) -> str:
        removed.append(m.group())
        return m.group(1)

    def drop(m: re.Match[str]) -> str:
        removed.append(m.group())
        return ""

    text = _MD_LINK.sub(words, text)
    text = _HTML.sub(drop, text)
    text = _URL.sub(drop, text)
    return re.sub(r"[ \t]{2,}", " ", text) if removed else text, removed


def _numbers(group: str) -> list[int]:
    out: list[int] = []
    for part in re.split(r"\s*[,;]\s*", group.strip()):
        bounds = re.split(r"\s*[\-–]\s*", part)
        if len(bounds) == 2 and bounds[0] and bounds[1]:
            lo, hi = int(bounds[0]), int(bounds[1])
            out.extend(range(lo, hi + 1) if 0 <= hi - lo < 50 else [lo, hi])
        else:
            out.extend(int(b) for b in bounds if b)
    return out


def split_sentences(text: str, language: str | None = None) -> list[str]:
    """Sentences with their trailing markers; pieces without a letter or digit are dropped. With `language="de"` a
    stop that belongs to an abbreviation ("z. B.", "bzw.") ends no sentence (citerag.abbreviations)."""
    out, pos = [], 0
    for m in _END.finditer(text):
        if language is not None and m.group().endswith(".") and continues(text[pos:m.end()], text[m.end():],
                                                                             language):
            continue
        out.append(text[pos:m.end()])
        pos = m.end()
    out.append(text[pos:])
    return [s.strip() for s in out if _WORD.search(_MARKER.sub("", s))]


def check_citations(text: str, n_sources: int, language: str | None = None) -> tuple[str, CitationCheck]:
    """The answer with links and markers that name no source removed, and what the check found; `language` is the
    answer's, for where its sentences end (split_sentences)."""
    text, links = strip_links(text)
    valid = set(range(1, n_sources + 1))
    invalid: list[str] = []
    cited: set[int] = set()
    count = 0

    def fix(m: re.Match[str]) -> str:
        nonlocal count
        numbers = _numbers(m.group(2))
        good = [n for n in numbers if n in valid]
        if not good:
            invalid.append(m.group().strip())
            return ""
        bad = [n for n in numbers if n not in valid]
        invalid.extend(str(n) for n in bad)
        cited.update(good)
        count += len(good)
        if not bad:
            return m.group()
        return m.group(1) + "[" + ", ".join(str(n) for n in dict.fromkeys(good)) + "]"

    cleaned = _MARKER.sub(fix, text).strip()
    sentences = split_sentences(cleaned, language)
    with_marker = [s for s in sentences if _MARKER.search(s)]
    result = CitationCheck(n_sources=n_sources, cited=sorted(cited), valid_markers=count, invalid=invalid,
                           unused=sorted(valid - cited), sentences=len(sentences), cited_sentences=len(with_marker),
                           uncited=[s for s in sentences if not _MARKER.search(s)], links_removed=links)
    return cleaned, result


class CheckedStream:
    """The checked answer as deltas while the model streams: text is sent only up to a point where no link,
    tag or [n] is still open, and only as the check leaves it, so nothing the check removes (a link, a marker
    naming no source) ever reaches a client, not even for a moment."""

    def __init__(self, n_sources: int) -> None:
        self.n_sources = n_sources
        self.raw = ""
        self.sent = ""

    def feed(self, delta: str) -> str:
        self.raw += delta
        clean, _ = check_citations(self.raw[:_closed_prefix(self.raw)], self.n_sources)
        return self._advance(clean)

    def finish(self, checked: str) -> str:
        """What is left of the whole checked text."""
        return self._advance(checked)

    def _advance(self, clean: str) -> str:
        if not clean.startswith(self.sent):  # the check changed what was sent (rare): the final text corrects it
            return ""
        out, self.sent = clean[len(self.sent):], clean
        return out


def _closed_prefix(text: str) -> int:
    """The longest prefix ending in whitespace in which every [, ( and < is closed."""
    cut = len(text)
    while cut > 0:
        cut = max(text.rfind(" ", 0, cut), text.rfind("\n", 0, cut), text.rfind("\t", 0, cut))
        if cut < 0:
            return 0
        head = text[:cut]
        if head.count("[") <= head.count("]") and head.count("(") <= head.count(")") \
                and head.count("<") <= head.count(">"):
            return cut
    return 0


class CitationMetrics:
    """Counters over every checked answer; thread-safe, read with `snapshot()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.answers = 0
            self.flagged = 0
            self.invalid_markers = 0
            self.links_removed = 0
            self.unused_sources = 0
            self.sentences = 0
            self.cited_sentences = 0
            self.accuracy_sum = 0.0

    def record(self, check: CitationCheck) -> None:
        with self._lock:
            self.answers += 1
            self.flagged += check.flagged
            self.invalid_markers += len(check.invalid)
            self.links_removed += len(check.links_removed)
            self.unused_sources += len(check.unused)
            self.sentences += check.sentences
            self.cited_sentences += check.cited_sentences
            self.accuracy_sum += check.citation_accuracy

    def snapshot(self) -> dict[str, float | int]:
        with self._lock:
            return {
                "citerag_answers_checked_total": self.answers,
                "citerag_answers_flagged_total": self.flagged,
                "citerag_invalid_markers_removed_total": self.invalid_markers,
                "citerag_links_removed_total": self.links_removed,
                "citerag_unused_sources_total": self.unused_sources,
                "citerag_answer_sentences_total": self.sentences,
                "citerag_cited_sentences_total": self.cited_sentences,
                # Over all sentences (micro) and the mean of per-answer accuracies (macro).
                "citerag_citation_accuracy": self.cited_sentences / self.sentences if self.sentences else 0.0,
                "citerag_citation_accuracy_mean": self.accuracy_sum / self.answers if self.answers else 0.0,
            }



def answer_figures(answer: Answer, needle: str | None = None) -> dict[str, Any]:
    """Answer-level figures for an evaluation: one row per question.

    `needle_supported`: some source the answer validly cites contains the whole needle (whitespace runs
    collapsed); False for a refusal; None when no needle is given.
    """
    check: CitationCheck | None = getattr(answer, "check", None)
    supported: bool | None = None
    if needle is not None:
        target = collapse(needle)
        cited = set(check.cited) if check is not None else set()
        supported = (not answer.refused) and any(
            c.index in cited and target in collapse(c.quote) for c in answer.citations)
    return {
        "refused": answer.refused,
        "sources": len(answer.citations),
        "citation_accuracy": check.citation_accuracy if check is not None else None,
        "sentences": check.sentences if check is not None else 0,
        "valid_markers": check.valid_markers if check is not None else 0,
        "invalid_markers": len(check.invalid) if check is not None else 0,
        "unused_sources": len(check.unused) if check is not None else 0,
        "flagged": check.flagged if check is not None else False,
        "needle_supported": supported,
        "needle_retrieved": None if needle is None else any(collapse(needle) in collapse(c.quote)
                                                            for c in answer.citations),
    }
