"""Plain data passed between pipeline stages."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# A document uploaded through the API is keyed "upload:NAME": its bytes are kept by citerag.originals, never a path.
UPLOAD_SCHEME = "upload:"
# A document a source holds is keyed "source:NAME:KEY" (citerag.app.sources): its bytes are kept as an upload's are.
SOURCE_SCHEME = "source:"
# A document's tag (citerag.search.filters, a source's tag rules): letters, digits and . _ : / -, at most 64.
TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}\Z")
# A group that may read a document (Document.groups), as an identity provider names it (sre, team:hr, a@b/c).
GROUP = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,127}\Z")


@dataclass(frozen=True)
class Section:
    """A span of canonical text under one heading.

    `start` is where the span begins (the heading line itself, if any); `body_start` is where the
    section's own text begins, after the heading line. Chunkers cut [body_start, end).
    """

    title: str
    start: int
    body_start: int
    end: int
    # Context repeated in the embedded text of every chunk cut from this section, never in its content
    # (a spreadsheet's header row). Empty for prose formats, so their chunks are unchanged.
    prefix: str = ""


@dataclass(frozen=True)
class Locator:
    """Where the canonical span [start, end) sits in the source: one page, one cue, or one spreadsheet row.

    An extractor returns these sorted by `start` and non-overlapping; text between spans (separators,
    headings) has no locator. Exactly one of the groups is set: `page` (+ `ocr_confidence` when the
    page was OCR'd, 0-100), `t_start`/`t_end` (seconds), or `sheet` + `row` + `col_first`/`col_last`
    (1-based). The citation code resolves a chunk's range against them; chunking never sees them.
    """

    start: int
    end: int
    page: int | None = None
    ocr_confidence: float | None = None
    t_start: float | None = None
    t_end: float | None = None
    sheet: str | None = None
    row: int | None = None
    col_first: int | None = None
    col_last: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Locator:
        return cls(**data)


@dataclass
class Extracted:
    """What an extractor hands to the chunker: format-blind from here on."""

    text: str
    title: str
    sections: list[Section]
    extractor: str
    extractor_version: str
    warnings: list[str] = field(default_factory=list)
    locators: list[Locator] = field(default_factory=list)


@dataclass(frozen=True)
class Chunk:
    """`text` is embedded (header, overlap, content); `content` is the only thing ever quoted."""

    text: str
    content: str
    section: str
    start: int
    end: int
    header: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"text": self.text, "content": self.content, "section": self.section,
                "start": self.start, "end": self.end}


@dataclass
class Document:
    id: int
    source_path: str
    name: str
    title: str
    sha256: str
    status: str  # pending | indexed | failed
    error: str | None
    warnings: list[str]
    chunk_count: int
    stamps: dict[str, Any]
    updated_at: str
    # The extractor's locator map; loaded with the snapshot and by `document(id)`, empty in listings.
    locators: list[Locator] = field(default_factory=list)
    # What people who know the document say of it (`citerag tag`, the upload's tags, PUT .../tags): a search filter.
    tags: list[str] = field(default_factory=list)
    # The groups that may read it (citerag.keystore's principals); empty: everyone who may read the collection.
    groups: list[str] = field(default_factory=list)


def readable_by(groups: Sequence[str], audience: frozenset[str] | None) -> bool:
    """Whether a caller who may read `audience`'s documents (None: every document) may read a document open to
    `groups` (empty: everyone who may read its collection). The one rule every route and index applies."""
    return audience is None or not groups or not audience.isdisjoint(groups)


@dataclass(frozen=True)
class Facets:
    """What a search's filters read of an indexed document (StoreView.facets): the few fields they match, read
    without the rest of the row (a question with filters reads every document's)."""

    id: int
    source_path: str
    chunk_count: int
    extractor: str | None
    language: str | None
    updated_at: str
    tags: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()  # who may read it (Document.groups)


@dataclass
class StoredChunk:
    id: int
    document_id: int
    ordinal: int
    text: str
    content: str
    section: str
    start: int
    end: int


@dataclass
class Hit:
    chunk: StoredChunk
    document: Document
    rank: int
    score: float
    cosine_distance: float
    # The query's words occur verbatim in this chunk and in few others (search/phrase.py): decisive lexical
    # evidence, which ranks it first in the adaptive mode and lets the gate keep it whatever its distance.
    exact: bool = False
    # The share of the question's lexical evidence this chunk holds (BM25 / the question's idf mass,
    # search/fusion.py; 0 where BM25 did not score it): a calibrated rule also keeps a hit past its lexical cut.
    lexical: float = 0.0


@dataclass
class Citation:
    index: int
    document_id: int
    document_name: str
    source_path: str
    locator_label: str
    fragment: str
    start: int
    end: int
    quote: str
    cosine_distance: float
    # Mean Tesseract word confidence (0-100) of the least confident OCR'd page the quote touches.
    ocr_confidence: float | None = None
    section: str = ""  # the section title the quoted chunk sits in ("" before a document's first heading)
    # Where a source's document lives (citerag.app.sources): a web page's live URL, a Git file's forge page at the
    # commit read (its source's link template); "" for every other document.
    live_url: str = ""

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "index": self.index, "document_id": self.document_id, "document_name": self.document_name,
            "source_path": self.source_path, "locator_label": self.locator_label,
            "fragment": self.fragment, "start": self.start, "end": self.end, "quote": self.quote,
            "cosine_distance": round(self.cosine_distance, 6), "section": self.section,
        }
        if self.ocr_confidence is not None:
            data["ocr_confidence"] = round(self.ocr_confidence, 1)
        if self.live_url:
            data["live_url"] = self.live_url
        return data


@dataclass
class CitationCheck:
    """What citation checking found in one generated answer (see citerag.answer.check)."""

    n_sources: int
    cited: list[int]  # distinct valid source numbers the answer cites, ascending
    valid_markers: int  # valid [n] occurrences left in the text (a group [1, 2] counts 2)
    invalid: list[str]  # what was removed, as written, in order: "[7]", "[0]", "7" (from a group)
    unused: list[int]  # source numbers never cited
    sentences: int
    cited_sentences: int
    uncited: list[str] = field(default_factory=list)  # sentences without a valid [n]
    links_removed: list[str] = field(default_factory=list)  # URLs and HTML tags the model wrote, as written

    @property
    def flagged(self) -> bool:
        """No valid citation at all: nothing in the answer is tied to a source."""
        return not self.cited

    @property
    def citation_accuracy(self) -> float:
        return self.cited_sentences / self.sentences if self.sentences else 0.0

    def as_json(self) -> dict[str, Any]:
        return {"citation_accuracy": round(self.citation_accuracy, 4), "sentences": self.sentences,
                "cited_sentences": self.cited_sentences, "cited": self.cited, "valid_markers": self.valid_markers,
                "invalid_markers": self.invalid, "unused_sources": self.unused, "flagged": self.flagged,
                "uncited_sentences": self.uncited, "links_removed": self.links_removed}


@dataclass
class Answer:
    question: str
    refused: bool
    answer: str
    citations: list[Citation]
    prompt: str | None = None
    # Set on every generated answer (not on refusals): what citerag.answer.check found and removed.
    check: CitationCheck | None = None
    generator: str | None = None
    timings: dict[str, float] = field(default_factory=dict)  # seconds per stage: retrieve, rerank, generate, ...
    # The refusal rule's inputs: the closest hit's cosine distance (None when nothing was retrieved) and the cut.
    best_distance: float | None = None
    threshold: float | None = None
    # Which cache levels answered ("query", "retrieval", "answer" -> hit or not); empty when no cache was asked.
    cache: dict[str, bool] = field(default_factory=dict)
    trace_id: str | None = None  # the OpenTelemetry trace of the question (citerag.trace), when traced
    experiment: str | None = None  # the experiment and arm whose options answered (citerag.app.experiments)
    arm: str | None = None
    # The model's reported tokens and their cost (citerag.answer.pipeline.priced_usage); None when none reported.
    usage: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"question": self.question, "refused": self.refused, "answer": self.answer,
                                "citations": [c.as_json() for c in self.citations]}
        if self.check is not None:
            data["check"] = self.check.as_json()
        if self.generator is not None:
            data["generator"] = self.generator
        if self.threshold is not None:  # the refusal rule's inputs
            data["best_distance"] = None if self.best_distance is None else round(self.best_distance, 6)
            data["threshold"] = self.threshold
        if self.timings:
            data["timings_ms"] = {k: round(v * 1000, 2) for k, v in self.timings.items()}
        if self.cache:
            data["cache"] = self.cache
        if self.trace_id is not None:
            data["trace_id"] = self.trace_id
        if self.arm is not None:
            data["experiment"], data["arm"] = self.experiment, self.arm
        if self.usage is not None:
            data["usage"] = self.usage
        return data


def answer_from_dict(data: dict[str, Any]) -> Answer:
    """An Answer from dataclasses.asdict(answer) (what the answer cache keeps)."""
    check = data.get("check")
    return Answer(**{**data, "citations": [Citation(**c) for c in data["citations"]],
                     "check": CitationCheck(**check) if check is not None else None})


@dataclass
class SearchResult:
    """Ranked hits and, row for row, their citations (what `search` shows)."""

    hits: list[Hit]
    citations: list[Citation]
    timings: dict[str, float] = field(default_factory=dict)
    cache: dict[str, bool] = field(default_factory=dict)  # which cache levels answered (see Answer.cache)
    trace_id: str | None = None  # the search's trace (see Answer.trace_id)

    def as_json(self) -> list[dict[str, Any]]:
        """The rows (a list, so the trace id is not in it: the service sends it as X-Trace-Id)."""
        return [{"rank": h.rank, "score": h.score, **c.as_json()} for h, c in zip(self.hits, self.citations,
                                                                                   strict=True)]


@dataclass(frozen=True)
class Turn:
    """One question of a conversation as it was answered: what was asked, what was searched, what came back."""

    question: str
    query: str  # the retrieval query actually used (the question itself, or its rewrite)
    answer: str
    refused: bool
    citations: list[dict[str, Any]]  # Citation.as_json() of each source shown
    trace_id: str | None = None
    n: int = 0  # 1-based position in the conversation, given by the store
    created_at: str = ""


@dataclass(frozen=True)
class ConversationInfo:
    id: str
    owner: str  # who started it: an API key's id, or "local" for the command line
    title: str  # its first question, cut
    turns: int
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class Label:
    """A production question labelled for evaluation (citerag.app.labels): the needle, a span of a document's
    canonical text that answers it, or out of domain (kind "ood", no span)."""

    trace_id: str  # the answer's trace it was labelled from
    question: str
    kind: str  # "needle" | "ood"
    document_id: int | None = None
    start: int | None = None  # code points into the document's canonical text
    end: int | None = None
    needle: str = ""
    by: str = ""  # an API key's id, or "local"
    asked_at: float = 0.0  # when the question was asked (seconds since the epoch)
    labelled_at: str = ""


@dataclass(frozen=True)
class Experiment:
    """Two pipeline arms of a collection with a traffic split (citerag.app.experiments): each arm is per-request
    options (AskOptions' fields); a request goes to "b" with probability `split`, sticky per key or conversation."""

    name: str
    a: dict[str, Any]
    b: dict[str, Any]
    split: float  # the share of traffic arm "b" gets
    sticky: str  # "key" | "conversation"
    started_at: str = ""
    stopped_at: str | None = None


@dataclass
class SourceInfo:
    """A configured origin of a collection's documents (citerag.app.sources): a folder, a Git repository or a
    website, its options (branch, globs, sitemap, prefix, link template, limits), its schedule and its status
    (last attempt and success, the counts and error of the last sync, the next run, failures in a row)."""

    name: str
    kind: str  # "folder" | "git" | "web"
    location: str  # the folder's path or the URL
    options: dict[str, Any] = field(default_factory=dict)
    interval_s: float | None = None  # every so many seconds, or on `cron`, or only when asked (both None)
    cron: str | None = None
    created_at: str = ""
    status: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SourceItem:
    """One document a source holds: the source's own key for it (a path, a URL), the version token it was synced
    at, and where a citation opens the live original."""

    key: str
    token: str
    document_id: int
    link: str = ""
    origin: str = ""
