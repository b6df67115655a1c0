"""Production questions labelled into an evaluation set: sample kept answers over time, show each question with the
passages it retrieved, and record the needle a person chose (a span of one passage) or "out of domain".

Only answers whose question text was kept can be labelled (`trace_text = true`): without it there is no question.
Sampling is stratified over time, so that a monthly refresh covers the month and not its busiest day: the window
from the oldest to the newest candidate is cut into equal parts and each part gives one question (the ones whose
feedback named a source first, since a person already said where the answer is), then any part left short is
filled from the rest. A question asked again in the same words is one candidate. citerag.eval.labelled writes the
labels out as a dev set.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.trace.store import root_span, spans_named
from citerag.types import Label

MIN_NEEDLE_CHARS = 12
MAX_NEEDLE_CHARS = 2000
PASSAGES = 5  # shown per question: the top hits (and the one feedback named, if lower)


class LabelError(CiteragError):
    """A label that does not fit its question or document; `field` names what is wrong."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Passage:
    rank: int  # 1-based, in the answer's retrieval
    document_id: int
    document_name: str
    section: str
    start: int  # code points into the document's canonical text
    end: int
    text: str
    cited: int | None  # the answer's [n] for this passage, when it was cited


@dataclass(frozen=True)
class Candidate:
    trace_id: str
    question: str
    asked_at: float
    passages: list[Passage]
    suggested: int | None  # the index into `passages` that feedback named as the right source
    feedback: list[dict[str, Any]]


def _asked_at(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(root_span(record)["start"]).timestamp()


def passages(collection: Collection, record: dict[str, Any], limit: int = PASSAGES) -> tuple[list[Passage], int | None]:
    """The passages the answer retrieved, as stored now (a chunk since replaced is left out), the top `limit` and
    the one its feedback named; and which of them feedback named as the right source."""
    ranked = [int(i) for i in root_span(record)["attributes"].get("citerag.hits.chunk_ids", [])]
    gate = spans_named(record, "citerag.gate")
    cited_ids = [int(i) for i in gate[0]["attributes"].get("citerag.hits.chunk_ids", [])] if gate else []
    named = next((f["source"] for f in reversed(record.get("feedback", [])) if f.get("source")), None)
    named_id = cited_ids[named - 1] if named is not None and 0 < named <= len(cited_ids) else None
    wanted = ranked[:limit] + ([named_id] if named_id is not None and named_id not in ranked[:limit] else [])
    with collection.store.view() as view:
        chunks = view.chunks(wanted)
        documents = view.documents({c.document_id for c in chunks.values()})
    out: list[Passage] = []
    for chunk_id in wanted:
        chunk = chunks.get(chunk_id)
        if chunk is None or chunk.document_id not in documents:
            continue
        cited = cited_ids.index(chunk_id) + 1 if chunk_id in cited_ids else None
        out.append(Passage(ranked.index(chunk_id) + 1, chunk.document_id, documents[chunk.document_id].name,
                           chunk.section, chunk.start, chunk.end, chunk.content, cited))
    suggested = next((i for i, p in enumerate(out) if named_id is not None and p.cited == named), None)
    return out, suggested


def candidates(collection: Collection, n: int, since: float = 0.0, seed: int = 0) -> list[Candidate]:
    """Up to `n` unlabelled answers asked since `since`, stratified over time (see the module's docstring), oldest
    first."""
    if n < 1:
        raise LabelError("n must be at least 1", "n")
    store = collection.traces
    if store is None:
        return []
    labelled = collection.store.labels()
    done = {label.trace_id for label in labelled}
    seen = {" ".join(label.question.split()).casefold() for label in labelled}
    by_words: dict[str, dict[str, Any]] = {}
    for record in store.answers(since):  # newest first: the newest asking of a question stands for it, unless an
        words = " ".join(str(record.get("question", "")).split()).casefold()  # older one has feedback naming a source
        if record["trace_id"] in done or not words or words in seen:
            continue
        if words not in by_words or (_named(record) and not _named(by_words[words])):
            by_words[words] = record
    pool = list(by_words.values())
    chosen = stratified(pool, n, random.Random(seed))
    out = []
    for record in sorted(chosen, key=_asked_at):
        found, suggested = passages(collection, record)
        out.append(Candidate(record["trace_id"], str(record["question"]), _asked_at(record), found, suggested,
                             record.get("feedback", [])))
    return out


def _named(record: dict[str, Any]) -> bool:
    return any(f.get("source") for f in record.get("feedback", []))


def stratified(pool: list[dict[str, Any]], n: int, rng: random.Random) -> list[dict[str, Any]]:
    if len(pool) <= n:
        return list(pool)
    times = [_asked_at(r) for r in pool]
    low, high = min(times), max(times)
    width = (high - low) / n or 1.0
    strata: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    for record, t in zip(pool, times, strict=True):
        strata[min(n - 1, int((t - low) / width))].append(record)
    chosen: list[dict[str, Any]] = []
    for stratum in strata:
        if stratum:
            named = [r for r in stratum if _named(r)]
            chosen.append(rng.choice(named or stratum))
    rest = [r for r in pool if not any(r is c for c in chosen)]
    chosen.extend(rng.sample(rest, n - len(chosen)))
    return chosen


def label(collection: Collection, trace_id: str, by: str, *, document_id: int | None = None,
          start: int | None = None, end: int | None = None, ood: bool = False) -> Label:
    """Label the answer traced as `trace_id`: the needle `start:end` of document `document_id`'s canonical text,
    or out of domain. Replaces an earlier label of the same answer."""
    record = collection.traces.get(trace_id) if collection.traces is not None else None
    if record is None or record.get("operation") != "ask":
        raise LabelError(f"answer {trace_id} not found", "trace_id")
    if not record.get("text_kept"):
        raise LabelError(f"answer {trace_id} kept no question text (trace_text is off): it cannot be labelled",
                         "trace_id")
    question, asked_at = str(record["question"]), _asked_at(record)
    if ood:
        if document_id is not None or start is not None or end is not None:
            raise LabelError("an out-of-domain label names no document or span", "ood")
        return collection.store.add_label(Label(record["trace_id"], question, "ood", by=by, asked_at=asked_at))
    if document_id is None or start is None or end is None:
        raise LabelError("a needle needs document_id, start and end (or ood: true)", "document_id")
    doc = collection.store.document(document_id)
    if doc is None or doc.status != "indexed":
        raise LabelError(f"document {document_id} not found", "document_id")
    with collection.store.view() as view:
        text = view.texts([document_id]).get(document_id)
    if text is None:
        raise LabelError(f"document {document_id} has no text", "document_id")
    if not 0 <= start < end <= len(text):
        raise LabelError(f"start and end must be 0 <= start < end <= {len(text)}", "start")
    needle = text[start:end]
    if not MIN_NEEDLE_CHARS <= len(needle.strip()) <= MAX_NEEDLE_CHARS:
        raise LabelError(f"a needle holds {MIN_NEEDLE_CHARS} to {MAX_NEEDLE_CHARS} characters", "end")
    return collection.store.add_label(Label(record["trace_id"], question, "needle", document_id, start, end, needle,
                                            by, asked_at))


def find_span(passage: Passage, words: str) -> tuple[int, int] | None:
    """Where `words` (as a person pastes them: any spacing) are in the passage, as document offsets."""
    wanted = words.split()
    if not wanted:
        return None
    text = passage.text
    exact = text.find(words.strip())
    if exact >= 0:
        return passage.start + exact, passage.start + exact + len(words.strip())
    # Whitespace-insensitive: walk the passage's words with their positions.
    spans = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", text)]
    tokens = [t for _, _, t in spans]
    for i in range(len(tokens) - len(wanted) + 1):
        if tokens[i:i + len(wanted)] == wanted:
            return passage.start + spans[i][0], passage.start + spans[i + len(wanted) - 1][1]
    return None
