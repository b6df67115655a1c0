"""Spans per stage, with the attributes a reader needs to say why an answer came out as it did: a question
answered, one refused, a search, an answer from the answer cache, and an indexed document (real encoder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trace_fixtures import ASKED, NOTES_V1, OFF_TOPIC, open_app

from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.ingest.files import Source
from citerag.trace import OPERATION


def trace_of(exported: InMemorySpanExporter, trace_id: str) -> dict[str, ReadableSpan]:
    spans = [s for s in exported.get_finished_spans() if s.context and format(s.context.trace_id, "032x") == trace_id]
    by_name = {s.name: s for s in spans}
    assert len(by_name) == len(spans), [s.name for s in spans]
    return by_name


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (span.attributes or {}).items()}


def test_an_answered_question_has_a_span_per_stage(notes_app: Citerag, exported: InMemorySpanExporter) -> None:
    answer = notes_app.ask(ASKED)
    assert not answer.refused and answer.trace_id is not None and len(answer.trace_id) == 32
    assert answer.as_json()["trace_id"] == answer.trace_id
    spans = trace_of(exported, answer.trace_id)
    assert set(spans) == {"citerag.ask", "citerag.answer_cache", "citerag.embed_query", "citerag.retrieve",
                          "citerag.retriever", "citerag.dense", "citerag.bm25", "citerag.fusion", "citerag.gate",
                          "citerag.cite", "citerag.generate", "citerag.check"}  # adaptive: dense and BM25, fused
    root = spans["citerag.ask"]
    assert root.parent is None and attrs(root)[OPERATION] == "ask"
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id  # type: ignore[union-attr]
               for name, s in spans.items()
               if name not in ("citerag.ask", "citerag.retriever", "citerag.dense", "citerag.bm25", "citerag.fusion"))
    assert spans["citerag.dense"].parent.span_id == spans["citerag.retriever"].context.span_id  # type: ignore
    assert spans["citerag.fusion"].parent.span_id == spans["citerag.retriever"].context.span_id  # type: ignore
    assert spans["citerag.bm25"].parent.span_id == spans["citerag.retriever"].context.span_id  # type: ignore
    assert spans["citerag.retriever"].parent.span_id == spans["citerag.retrieve"].context.span_id  # type: ignore
    assert attrs(root)["citerag.options.mode"] == "adaptive" and attrs(root)["citerag.refused"] is False
    assert attrs(spans["citerag.answer_cache"])["citerag.cache.hit"] is False
    assert attrs(spans["citerag.embed_query"])["citerag.cache.hit"] is False

    retrieve = attrs(spans["citerag.retrieve"])
    assert retrieve["citerag.mode"] == "adaptive" and retrieve["citerag.cache.hit"] is False
    ids, distances = retrieve["citerag.hits.chunk_ids"], retrieve["citerag.hits.distances"]
    assert len(ids) == len(distances) == retrieve["citerag.hits.count"] >= 2
    assert retrieve["citerag.hits.ranks"] == list(range(1, len(ids) + 1)) and distances == sorted(distances)

    gate = attrs(spans["citerag.gate"])
    assert gate["citerag.gate.decision"] == "answered" and gate["citerag.gate.threshold"] == 0.675
    assert gate["citerag.gate.best_distance"] == distances[0] < 0.675
    assert gate["citerag.gate.kept"] == len(answer.citations) == len(gate["citerag.hits.chunk_ids"])
    assert gate["citerag.hits.chunk_ids"] == ids[:gate["citerag.gate.kept"]]

    generate = attrs(spans["citerag.generate"])
    assert generate["citerag.generator"] == "extractive" and generate["citerag.generate.output_chars"] > 0
    check = attrs(spans["citerag.check"])
    assert check["citerag.check.flagged"] is False and check["citerag.check.invalid_markers"] == []
    assert check["citerag.check.valid_markers"] == answer.check.valid_markers  # type: ignore[union-attr]
    # No user text in any span: not the question, not the answer.
    for span in spans.values():
        for value in attrs(span).values():
            assert "lighthouse" not in str(value).lower() and answer.answer not in str(value)

    again = notes_app.ask(ASKED)  # the answer cache short-circuits, visibly
    cached = trace_of(exported, again.trace_id)  # type: ignore[arg-type]
    assert set(cached) == {"citerag.ask", "citerag.answer_cache"}
    assert attrs(cached["citerag.answer_cache"])["citerag.cache.hit"] is True
    assert attrs(cached["citerag.ask"])["citerag.cache.answer"] is True
    assert attrs(cached["citerag.ask"])["citerag.hits.chunk_ids"] == ids


def test_a_refused_question_stops_at_the_gate(notes_app: Citerag, exported: InMemorySpanExporter) -> None:
    answer = notes_app.ask(OFF_TOPIC)
    assert answer.refused and answer.trace_id
    spans = trace_of(exported, answer.trace_id)
    assert "citerag.generate" not in spans and "citerag.check" not in spans
    gate = attrs(spans["citerag.gate"])
    assert gate["citerag.gate.decision"] == "refused" and gate["citerag.gate.kept"] == 0
    assert gate["citerag.gate.best_distance"] == round(answer.best_distance, 6) > 0.675  # type: ignore[arg-type]
    assert gate["citerag.hits.chunk_ids"] == []
    assert attrs(spans["citerag.ask"])["citerag.refused"] is True


def test_a_streamed_answer_and_a_search_are_traced(notes_app: Citerag, exported: InMemorySpanExporter) -> None:
    events = list(notes_app.collection().ask_events("Where does the ferry leave from?"))
    final = events[-1][1]
    assert events[-1][0] == "answer" and final.trace_id
    assert {"citerag.gate", "citerag.generate"} <= set(trace_of(exported, final.trace_id))
    result = notes_app.search("ferry pier")
    spans = trace_of(exported, result.trace_id)  # type: ignore[arg-type]
    assert set(spans) == {"citerag.search", "citerag.embed_query", "citerag.retrieve", "citerag.retriever",
                          "citerag.dense", "citerag.bm25", "citerag.fusion"}
    assert attrs(spans["citerag.search"])["citerag.hits.chunk_ids"] == [h.chunk.id for h in result.hits]
    # Hybrid: the dense and BM25 rankings and their fusion, each a span with the chunk ids it returned.
    hybrid = notes_app.search("ferry pier", SearchOptions(mode="hybrid", k=3))
    stages = trace_of(exported, hybrid.trace_id)  # type: ignore[arg-type]
    assert {"citerag.dense", "citerag.bm25", "citerag.fusion"} <= set(stages)
    fused = attrs(stages["citerag.fusion"])["citerag.hits.chunk_ids"]
    assert fused == [h.chunk.id for h in hybrid.hits] and len(fused) <= 3
    assert set(fused) <= set(attrs(stages["citerag.dense"])["citerag.hits.chunk_ids"]) | \
        set(attrs(stages["citerag.bm25"])["citerag.hits.chunk_ids"])
    # The query's vector was embedded for the question above? No: another text, so a miss; now a hit.
    again = notes_app.search("ferry pier")
    assert attrs(trace_of(exported, again.trace_id)["citerag.embed_query"])["citerag.cache.hit"] is True  # type: ignore


def test_an_indexed_document_has_extract_chunk_embed_store(tmp_path: Path, exported: InMemorySpanExporter) -> None:
    with open_app(tmp_path / "index") as app:
        exported.clear()
        outcome = app.index_document(Source("notes.md", NOTES_V1.encode()))
        spans = {s.name: s for s in exported.get_finished_spans()}
        assert set(spans) == {"citerag.index_document", "citerag.extract", "citerag.chunk", "citerag.embed",
                              "citerag.store"}
        root = attrs(spans["citerag.index_document"])
        assert root[OPERATION] == "index" and root["citerag.document.id"] == outcome.document_id
        assert root["citerag.document.status"] == "indexed"
        chunk = attrs(spans["citerag.chunk"])
        stored = [c for c in app.collection().indexed_chunks()[0]]
        assert chunk["citerag.chunks.count"] == len(stored) == attrs(spans["citerag.store"])["citerag.chunks.count"]
        assert chunk["citerag.chunks.starts"] == [c.start for c in stored]
        assert attrs(spans["citerag.extract"])["citerag.extractor"] and attrs(spans["citerag.embed"])[
            "citerag.embed.count"] == len(stored)
        kept = app.collection().trace(format(spans["citerag.store"].context.trace_id, "032x"))  # type: ignore
        assert kept is not None and kept["operation"] == "index" and len(kept["spans"]) == 5
