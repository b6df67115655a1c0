"""The application's data: what one request may change (options), what status reports, and the errors a
caller handles (an empty collection is a client error, not a refusal). Plain dataclasses, no behaviour."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from citerag.errors import CiteragError
from citerag.keystore.base import checked_groups  # noqa: F401 - for the entry points
from citerag.refusal import RefusalRule
from citerag.search.filters import FilterError, Filters, checked_tags  # noqa: F401 - for the entry points
from citerag.types import Document


@dataclass(frozen=True)
class SearchOptions:
    """What one search may change; None takes the collection's setting."""

    mode: str | None = None
    k: int | None = None
    rerank_model: str | None = None  # a cross-encoder folder; "" turns reranking off
    shortlist: int | None = None
    # Which documents may be searched: applied inside each index, in the cache keys, never a setting.
    filters: Filters = field(default_factory=Filters)

    def changes(self) -> dict[str, Any]:
        return {"mode": self.mode, "k": self.k, "rerank_model": self.rerank_model, "rerank_shortlist": self.shortlist}


@dataclass(frozen=True)
class AskOptions(SearchOptions):
    """What one question may change besides the search: the refusal rule and the generator."""

    threshold: float | None = None
    max_sources: int | None = None
    generator: str | None = None
    lexical_threshold: float | None = None  # with an explicit threshold (a replay passes the rule's own)
    # The experiment arm that chose these options (citerag.app.experiments): traced, never a setting.
    experiment: str | None = None
    arm: str | None = None

    def changes(self) -> dict[str, Any]:
        return {**super().changes(), "threshold": self.threshold, "max_sources": self.max_sources,
                "generator": self.generator, "lexical_threshold": self.lexical_threshold}


@dataclass(frozen=True)
class Followup:
    """A conversation's turn made standalone: what was asked, the query searched instead, and how it was made from
    the earlier turns ("fold", "llm", or "fold, llm failed"); `conversation_id` is None for an OpenAI client's
    messages, which are not kept. The trace records the method, and the words asked where it keeps text."""

    asked: str
    query: str
    rewrite: str
    earlier: int  # how many earlier turns it was made from
    conversation_id: str | None = None


@dataclass
class DocumentStatus:
    document: Document
    stale: bool

    def as_json(self) -> dict[str, Any]:
        d = self.document
        return {"id": d.id, "source_path": d.source_path, "name": d.name, "title": d.title, "status": d.status,
                "error": d.error, "warnings": d.warnings, "chunk_count": d.chunk_count, "stamps": d.stamps,
                "tags": d.tags, "groups": d.groups,
                "stale": self.stale, "updated_at": d.updated_at}


@dataclass
class RefusalStatus:
    """Which rule refuses questions: the calibrated cut (`rule`) or the threshold setting, and why."""

    rule: str  # "calibrated" | "threshold"
    threshold: float  # the cut in use
    reason: str  # why this rule (no calibration yet, set explicitly, ...)
    calibration: RefusalRule | None = None  # the collection's calibration for its encoder, used or not
    lexical_threshold: float | None = None  # the lexical cut in use (None: distance and exact words only)

    def as_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "threshold": self.threshold, "lexical_threshold": self.lexical_threshold,
                "reason": self.reason,
                "calibration": None if self.calibration is None else dataclasses.asdict(self.calibration)}


@dataclass(frozen=True)
class RetrieverStatus:
    """How questions are ranked here: the mode and, for the default (adaptive), its weights and where they come
    from (citerag.search.fusion; chosen leave-one-set-out on the dev sets, the same for every collection)."""

    mode: str
    lexical_weight: float  # BM25 / idf mass is added to the cosine with this weight (adaptive)
    foreign_share: float | None  # the English-only models' share for a question not in English (fused encoders)
    encoder: str

    def describe(self) -> str:
        if self.mode != "adaptive":
            return f"{self.mode} ({self.encoder})"
        share = ("" if self.foreign_share is None else
                 f"; a question not in English ranks with the English-only model at {self.foreign_share:g} of the "
                 "cosine")
        return (f"adaptive ({self.encoder}): exact words first, then cosine + {self.lexical_weight:g} x BM25 / the "
                f"question's idf mass{share}")

    def as_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "description": self.describe()}


@dataclass
class CollectionStatus:
    collection: str
    location: str
    documents: list[DocumentStatus] = field(default_factory=list)
    refusal: RefusalStatus | None = None
    # Settings whose newer default the collection does not follow (kept from its documents): name → (kept, default).
    newer_defaults: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    retriever: RetrieverStatus | None = None

    @property
    def notes(self) -> list[str]:
        """What a person should know: a newer default this collection keeps away from, and how to move to it."""
        return [f"a newer default exists: {name} = {default!r} (this collection keeps {kept!r}, the choice its "
                f"documents were indexed with; set {name} and run `citerag reindex --stale` to move)"
                for name, (kept, default) in self.newer_defaults.items()]

    @property
    def counts(self) -> dict[str, int]:
        counts = {s: sum(r.document.status == s for r in self.documents) for s in ("indexed", "failed", "pending")}
        counts["stale"] = sum(r.stale for r in self.documents)
        return counts

    def as_json(self) -> dict[str, Any]:
        return {"collection": self.collection, "index": self.location, "counts": self.counts,
                "refusal": None if self.refusal is None else self.refusal.as_json(),
                "retriever": None if self.retriever is None else self.retriever.as_json(),
                "documents": [r.as_json() for r in self.documents]} | \
            ({"newer_defaults": {k: {"kept": v[0], "default": v[1]} for k, v in self.newer_defaults.items()}}
             if self.newer_defaults else {})


def check_text(text: str, what: str) -> str:
    """A question or query as the pipeline needs it: not blank, and text (a terminal may hand over bytes that
    are not UTF-8 as surrogates, which no encoder or store accepts)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise CiteragError(f"the {what} is not valid UTF-8") from None
    if not text.strip():
        raise CiteragError(f"the {what} is empty")
    return text



class EmptyCollection(CiteragError):
    """A search or question on a collection with nothing indexed (a client error, not a refusal)."""


@dataclass(frozen=True)
class Accepted:
    """An upload taken in: its document (new and pending, or the one that already holds these bytes)."""

    document: Document
    existed: bool

