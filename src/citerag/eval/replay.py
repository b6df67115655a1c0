"""Replay: a kept query asked again, with the same options, against today's index (through the application
core), and what changed: hits added, removed and moved (with their distances), the gate's decision, the answer.

Hits are matched by document and content digest (citerag.trace.setup.hit_attributes): a replaced document's
unchanged passages get new chunk ids but are the same passages; only the passages that changed are reported.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from citerag.trace.store import root_span, spans_named


@dataclass(frozen=True)
class Row:
    chunk_id: int
    document_id: int
    rank: int
    distance: float


@dataclass
class Replay:
    old_trace: str
    new_trace: str | None
    operation: str
    added: list[Row] = field(default_factory=list)
    removed: list[Row] = field(default_factory=list)
    moved: list[tuple[Row, Row]] = field(default_factory=list)
    unchanged: int = 0
    decision: tuple[str | None, str | None] = (None, None)
    best: tuple[float | None, float | None] = (None, None)
    answer_diff: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"replay of {self.old_trace} ({self.operation}) as {self.new_trace or '(not kept)'}"]
        if not (self.added or self.removed or self.moved):
            out.append(f"hits: unchanged ({self.unchanged})")
        else:
            out.append(f"hits: {len(self.added)} added, {len(self.removed)} removed, {len(self.moved)} moved, "
                       f"{self.unchanged} unchanged")
        out += [f"  - removed chunk {r.chunk_id} (document {r.document_id}) rank {r.rank} d={r.distance:.4f}"
                for r in self.removed]
        out += [f"  + added   chunk {r.chunk_id} (document {r.document_id}) rank {r.rank} d={r.distance:.4f}"
                for r in self.added]
        out += [f"  ~ moved   chunk {a.chunk_id}->{b.chunk_id} (document {b.document_id}) rank {a.rank}->{b.rank} "
                f"d={a.distance:.4f}->{b.distance:.4f}" for a, b in self.moved]
        if self.operation == "ask":
            (was, now), (b0, b1) = self.decision, self.best
            same = "unchanged" if was == now else "CHANGED"
            out.append(f"gate: {was} -> {now} ({same}); best distance {_d(b0)} -> {_d(b1)}")
            out.append("answer: unchanged" if not self.answer_diff else "answer:")
            out += [f"  {line}" for line in self.answer_diff]
        return out


def _d(value: float | None) -> str:
    return "none" if value is None else f"{value:.4f}"


def rows(span: dict[str, Any]) -> dict[tuple[int, str], Row]:
    """A span's hits by (document, content digest)."""
    a = span["attributes"]
    ids, docs, ranks = a.get("citerag.hits.chunk_ids", []), a.get("citerag.hits.document_ids", []), \
        a.get("citerag.hits.ranks", [])
    distances, digests = a.get("citerag.hits.distances", []), a.get("citerag.hits.content_ids", [])
    return {(int(d), str(c)): Row(int(i), int(d), int(r), float(x))
            for i, d, r, x, c in zip(ids, docs, ranks, distances, digests, strict=True)}


def gate_of(record: dict[str, Any]) -> tuple[str | None, float | None]:
    gates = spans_named(record, "citerag.gate")
    if gates:
        a = gates[-1]["attributes"]
        return a.get("citerag.gate.decision"), a.get("citerag.gate.best_distance")
    root = root_span(record)["attributes"]  # an answer from the answer cache: the decision it replayed
    refused = root.get("citerag.refused")
    return (None if refused is None else ("refused" if refused else "answered")), None


def compare(old: dict[str, Any], new: dict[str, Any]) -> Replay:
    """What changed between two records of the same query."""
    before, after = rows(root_span(old)), rows(root_span(new))
    result = Replay(old["trace_id"], new["trace_id"], str(old["operation"]))
    result.removed = sorted((r for key, r in before.items() if key not in after), key=lambda r: r.rank)
    result.added = sorted((r for key, r in after.items() if key not in before), key=lambda r: r.rank)
    for key, was in sorted(before.items(), key=lambda kv: kv[1].rank):
        now = after.get(key)
        if now is None:
            continue
        if (was.rank, round(was.distance, 6)) != (now.rank, round(now.distance, 6)):
            result.moved.append((was, now))
        else:
            result.unchanged += 1
    if result.operation == "ask":
        (d0, b0), (d1, b1) = gate_of(old), gate_of(new)
        result.decision, result.best = (d0, d1), (b0, b1)
        if old.get("answer") != new.get("answer"):
            result.answer_diff = list(difflib.unified_diff(
                (old.get("answer") or "").splitlines(), (new.get("answer") or "").splitlines(),
                "before", "after", lineterm="", n=1))
    return result


def replay(collection: Any, old: dict[str, Any]) -> Replay:
    """Ask or search again as `old` did, through the collection (citerag.app.collection.Collection), and compare."""
    from citerag.app.models import AskOptions, Filters, SearchOptions
    from citerag.errors import CiteragError

    if not old.get("text_kept"):
        raise CiteragError(f"trace {old['trace_id']} cannot be replayed: its question was not kept "
                           "(set trace_text = true in the collection's config.toml to keep questions)")
    o = old["options"]
    if old["operation"] == "search":
        trace_id = collection.search(old["question"], SearchOptions(
            mode=o["mode"], k=o["k"], rerank_model=o["rerank_model"], shortlist=o["shortlist"],
            filters=Filters.parse(o.get("filters")))).trace_id
    elif old["operation"] == "ask":
        trace_id = collection.ask(old["question"], AskOptions(
            mode=o["mode"], k=o["k"], rerank_model=o["rerank_model"], shortlist=o["shortlist"],
            threshold=o["threshold"], max_sources=o["max_sources"], generator=o["generator"],
            lexical_threshold=o.get("lexical_threshold"), filters=Filters.parse(o.get("filters")))).trace_id
    else:
        raise CiteragError(f"trace {old['trace_id']} is a {old['operation']}, not a query: only queries replay")
    new = collection.trace(trace_id) if trace_id else None
    if new is None:
        raise CiteragError("the replayed query's trace was not kept (is trace_keep 0?)")
    return compare(old, new)
