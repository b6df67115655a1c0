"""Feedback on an answer: helpful or not, optionally which cited source was the right one (its [n]) or that none
was, and a comment. Kept with the answer's trace (citerag.trace.base.TraceStore.add_feedback), so it needs a kept
trace: it goes when the trace store drops the trace (`trace_keep`), and with its collection. The comment is user
text, kept like feedback's other fields whatever `trace_text` says (the person chose to write it down)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from citerag.app import access
from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.trace.store import root_span

MAX_COMMENT_CHARS = 2000


class AnswerNotFound(CiteragError):
    """No kept trace of an answer under this id in this collection (never asked, a search, or dropped)."""


class FeedbackError(CiteragError):
    """Feedback that does not fit its answer; `field` names what is wrong."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Feedback:
    helpful: bool
    source: int | None = None  # the [n] of the cited source that answered the question
    none_right: bool = False  # none of the cited sources did
    comment: str = ""


def give(collection: Collection, trace_id: str, feedback: Feedback, by: str,
         audience: frozenset[str] | None = None) -> dict[str, Any]:
    """Keep `feedback` by `by` (an API key's id, or "local") on the answer traced as `trace_id`; the record kept,
    with how many the answer now has. An answer that names a document `audience` may not read is not found."""
    if feedback.source is not None and feedback.none_right:
        raise FeedbackError("give either source or none_right, not both", "source")
    if len(feedback.comment) > MAX_COMMENT_CHARS:
        raise FeedbackError(f"comment is longer than {MAX_COMMENT_CHARS} characters", "comment")
    missing = AnswerNotFound(f"answer {trace_id} not found")
    store = collection.traces
    record = store.get(trace_id) if store is not None else None
    if store is None or record is None or record.get("operation") != "ask" or \
            not access.names_only_readable(collection, access.trace_documents(record), audience):
        raise missing
    traced = root_span(record)["attributes"]
    cited = int(traced.get("citerag.citations.count", 0))
    if feedback.source is not None and not 1 <= feedback.source <= cited:
        raise FeedbackError(f"source {feedback.source} is not one of the answer's {cited} citations", "source")
    kept = {**asdict(feedback), "by": by, "at": round(time.time(), 3)}
    if traced.get("citerag.arm"):  # the experiment arm that answered: the report and the metrics count per arm
        kept |= {"experiment": traced.get("citerag.experiment"), "arm": traced["citerag.arm"]}
    count = store.add_feedback(trace_id, kept)
    if count is None:  # dropped since it was read
        raise missing
    return {**kept, "trace_id": trace_id.lower(), "count": count}
