"""The trace store: bounded (the oldest dropped first), and the question and answer kept only when the
collection's setting trace_text allows it; a conversation's follow-up traced with the words asked and how the
searched query was made from the earlier turns."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trace_fixtures import ASKED, NOTES_V1, open_app

from citerag.answer.followup import PastTurn, folded_query
from citerag.app import conversations, feedback
from citerag.cli import cli
from citerag.config_file import set_in_config_file
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


FOLLOW_UP = "And which day of the week is that done?"


def test_a_follow_up_trace_says_what_was_asked_and_how_its_query_was_made(
        tmp_path: Path, exported: InMemorySpanExporter) -> None:
    for name, text in (("private", False), ("shared", True)):
        with open_app(tmp_path / name, trace_text=text) as app:
            app.index_document(Source("notes.md", NOTES_V1.encode()))
            collection = app.collection()
            first = conversations.ask(collection, ASKED, owner="local")
            then = conversations.ask(collection, FOLLOW_UP, owner="local", conversation_id=first.conversation_id)
            assert then.turn.trace_id == then.answer.trace_id and ASKED in then.turn.query != FOLLOW_UP
            record = collection.trace(then.answer.trace_id)  # type: ignore[arg-type]
            assert record is not None
            root = next(s for s in record["spans"] if s["name"] == "citerag.ask")["attributes"]
            # The method and the conversation on the span whatever the setting; never the words (see above).
            assert root["citerag.followup.rewrite"] == "fold" and root["citerag.followup.earlier_turns"] == 1
            assert root["citerag.conversation"] == first.conversation_id
            opening = collection.trace(first.answer.trace_id)  # type: ignore[arg-type]
            assert opening is not None
            assert opening["spans"][0]["attributes"]["citerag.followup.rewrite"] == "none"
            if not text:
                assert "asked" not in record and "question" not in record
                continue
            assert (record["asked"], record["question"]) == (FOLLOW_UP, then.turn.query)
    set_in_config_file(tmp_path / "shared", "trace_text", True)
    shown = CliRunner().invoke(cli, ["trace", "show", then.answer.trace_id or "", "--index", str(tmp_path / "shared")])
    assert shown.exit_code == 0, shown.output
    assert f"asked: {FOLLOW_UP}\nsearched: {then.turn.query}\n" in shown.output
    assert 'citerag.followup.rewrite = "fold"' in shown.output
    # Feedback given on that answer is shown with it.
    with open_app(tmp_path / "shared", trace_text=True) as app:
        kept = feedback.give(app.collection(), then.answer.trace_id or "", feedback.Feedback(False, none_right=True,
                             comment="it is every Tuesday"), "local")
        assert kept["count"] == 1
        with pytest.raises(feedback.FeedbackError, match="source 9 is not one of the answer's"):
            feedback.give(app.collection(), then.answer.trace_id or "", feedback.Feedback(True, source=9), "local")
    shown = CliRunner().invoke(cli, ["trace", "show", then.answer.trace_id or "", "--index", str(tmp_path / "shared")])
    assert 'feedback: not helpful, no source right (by local, ' in shown.output
    assert shown.output.split("feedback: ", 1)[1].splitlines()[0].endswith('): "it is every Tuesday"')


def test_a_follow_up_whose_llm_is_down_is_folded_and_says_so(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with open_app(tmp_path, generator="openai", openai_base_url=f"http://127.0.0.1:{port}/v1",
                  generator_retries=0) as app:
        earlier = [PastTurn(ASKED, sections=("Lighthouse",))]
        made = conversations.retrieval_query(app.collection(), earlier, FOLLOW_UP, conversation_id="c1")
    assert (made.query, made.rewrite, made.earlier, made.conversation_id) == (
        folded_query(earlier, FOLLOW_UP), "fold, llm failed", 1, "c1")


def test_trace_settings_are_validated() -> None:
    assert Settings(otlp_endpoint="http://127.0.0.1:4318").otlp_endpoint == "http://127.0.0.1:4318"
    for bad in ("127.0.0.1:4318", "ftp://collector", "http://", "http://h:4318/v1/traces?x=1"):
        with pytest.raises(ValueError, match="otlp_endpoint"):
            Settings(otlp_endpoint=bad)
    with pytest.raises(ValueError, match="trace_keep"):
        Settings(trace_keep=-1)
    with pytest.raises(SettingsError, match="trace_keep"):
        Settings().with_changes(trace_keep=True)
