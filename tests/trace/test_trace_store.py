"""The trace store: bounded (the oldest dropped first), and the question and answer kept only when the
collection's setting trace_text allows it."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trace_fixtures import ASKED, NOTES_V1, open_app

from citerag.errors import CiteragError
from citerag.eval.replay import replay
from citerag.ingest.files import Source
from citerag.settings import Settings, SettingsError


def test_the_store_keeps_the_newest_traces(tmp_path: Path, exported: InMemorySpanExporter) -> None:
    with open_app(tmp_path / "index", trace_keep=3) as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        ids = [app.search(f"ferry {n}").trace_id for n in range(5)]
        store = app.collection().traces
        assert store is not None and store.path == tmp_path / "index" / "traces.sqlite3"
        assert store.count() == 3
        assert [app.collection().trace(i) is None for i in ids] == [True, True, False, False, False]  # type: ignore
        record = app.collection().trace(ids[-1])  # type: ignore[arg-type]
        assert record is not None and record["operation"] == "search" and record["options"]["k"] == 20
        assert [s["name"] for s in record["spans"]][0] == "citerag.search"
        assert record["spans"][0]["attributes"]["citerag.hits.distances"]


def test_no_trace_is_kept_when_trace_keep_is_0(tmp_path: Path, exported: InMemorySpanExporter) -> None:
    with open_app(tmp_path / "index", trace_keep=0) as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        result = app.search("ferry")
        assert result.trace_id and app.collection().trace(result.trace_id) is None
    assert not (tmp_path / "index" / "traces.sqlite3").exists()


def test_text_is_kept_only_when_the_collection_allows_it(tmp_path: Path, exported: InMemorySpanExporter) -> None:
    with open_app(tmp_path / "private") as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        answer = app.ask(ASKED)
        record = app.collection().trace(answer.trace_id)  # type: ignore[arg-type]
        assert record is not None and record["text_kept"] is False
        assert "question" not in record and "answer" not in record
        assert record["options"]["threshold"] == 0.675 and record["options"]["mode"] == "adaptive"
        raw = b"".join(p.read_bytes() for p in (tmp_path / "private").glob("traces.sqlite3*"))  # and its -wal
        assert ASKED.encode() not in raw and answer.answer.encode() not in raw
        with pytest.raises(CiteragError, match="cannot be replayed: its question was not kept") as caught:
            replay(app.collection(), record)
        assert "\n" not in str(caught.value)
    with open_app(tmp_path / "shared", trace_text=True) as app:
        app.index_document(Source("notes.md", NOTES_V1.encode()))
        exported.clear()
        answer = app.ask(ASKED)
        record = app.collection().trace(answer.trace_id)  # type: ignore[arg-type]
        assert record is not None and record["text_kept"] is True
        assert record["question"] == ASKED and record["answer"] == answer.answer
        # Kept in the store, never put on a span (nothing exported carries it).
        assert all(ASKED not in str(v) for s in exported.get_finished_spans() for v in (s.attributes or {}).values())


def test_trace_settings_are_validated() -> None:
    assert Settings(otlp_endpoint="http://127.0.0.1:4318").otlp_endpoint == "http://127.0.0.1:4318"
    for bad in ("127.0.0.1:4318", "ftp://collector", "http://", "http://h:4318/v1/traces?x=1"):
        with pytest.raises(ValueError, match="otlp_endpoint"):
            Settings(otlp_endpoint=bad)
    with pytest.raises(ValueError, match="trace_keep"):
        Settings(trace_keep=-1)
    with pytest.raises(SettingsError, match="trace_keep"):
        Settings().with_changes(trace_keep=True)
