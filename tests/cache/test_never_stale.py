"""Every cache level keyed by the collection's generation: an answer asked again after a document changed is
computed from the new document, in memory and in a shared Redis; another collection's entries are never served."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.app.home import Citerag
from citerag.app.models import AskOptions, SearchOptions
from citerag.ingest.files import Source
from citerag.settings import Settings

OLD = "# Flux notes\n\nThe quartz flux capacitor of the citerag test rig needs exactly 42 volts to start.\n"
NEW = "# Flux notes\n\nThe quartz flux capacitor of the citerag test rig needs exactly 7 volts to start.\n"
QUESTION = "How many volts does the quartz flux capacitor of the test rig need?"


@pytest.fixture(params=["memory", "redis"])
def cache_url(request: pytest.FixtureRequest) -> str:
    return "memory" if request.param == "memory" else str(request.getfixturevalue("redis_url"))


def _open(index: Path, cache_url: str, collection: str = "default") -> Citerag:
    return Citerag.open(Settings(index_dir=index, cache_url=cache_url, collection=collection), create=True)


@pytest.fixture()
def app(tmp_path: Path, cache_url: str) -> Iterator[Citerag]:
    with _open(tmp_path / "index", cache_url) as opened:
        assert opened.index_document(Source("notes/flux.md", OLD.encode())).status == "indexed"
        yield opened


def test_each_level_answers_the_second_time(app: Citerag) -> None:
    first = app.ask(QUESTION)
    assert first.cache == {"query": False, "retrieval": False, "answer": False} and not first.refused
    second = app.ask(QUESTION)
    assert second.cache["answer"] and second.answer == first.answer and second.citations == first.citations
    # Another threshold is another answer, but the same retrieval.
    stricter = app.ask(QUESTION, AskOptions(threshold=0.6))
    assert stricter.cache == {"query": True, "retrieval": True, "answer": False}
    searched = app.search(QUESTION, SearchOptions(mode="bm25"))
    assert searched.cache == {"query": True, "retrieval": False}
    assert app.search(QUESTION, SearchOptions(mode="bm25")).cache["retrieval"]
    events = [kind for kind, _ in app.collection().ask_events(QUESTION)]
    assert events == ["retrieval", "citation", "delta", "answer"]  # a cached answer streams like a fresh one


def test_a_replaced_document_is_never_answered_from_before(app: Citerag) -> None:
    assert "42 volts" in app.ask(QUESTION).citations[0].quote
    assert "42 volts" in app.ask(QUESTION).citations[0].quote  # now cached at every level
    assert "42 volts" in app.search(QUESTION).citations[0].quote
    app.index_document(Source("notes/flux.md", NEW.encode()))
    after = app.ask(QUESTION)
    assert not after.cache["answer"] and not after.cache["retrieval"] and after.cache["query"]
    assert "7 volts" in after.citations[0].quote and "42 volts" not in after.answer
    assert "7 volts" in app.search(QUESTION).citations[0].quote
    app.delete(app.collection().documents()[0].id)
    app.index_document(Source("notes/other.md", b"# Other\n\nNothing about capacitors here, only bread.\n"))
    gone = app.ask(QUESTION)
    assert all("volts" not in c.quote for c in gone.citations)


def test_a_change_made_by_another_process_is_seen_through_a_shared_cache(tmp_path: Path, redis_url: str) -> None:
    index = tmp_path / "shared"
    with _open(index, redis_url) as server, _open(index, redis_url) as worker:
        server.index_document(Source("notes/flux.md", OLD.encode()))
        assert "42 volts" in server.ask(QUESTION).citations[0].quote
        assert worker.ask(QUESTION).cache["answer"]  # the other process's entry, same generation: shared
        worker.index_document(Source("notes/flux.md", NEW.encode()))
        assert "7 volts" in server.ask(QUESTION).citations[0].quote


def test_another_collection_never_gets_these_entries(tmp_path: Path, cache_url: str) -> None:
    # Same collection name, same document name, same question, same generation: only the store differs.
    with _open(tmp_path / "a", cache_url) as a, _open(tmp_path / "b", cache_url) as b:
        a.index_document(Source("notes/flux.md", OLD.encode()))
        b.index_document(Source("notes/flux.md", NEW.encode()))
        assert "42 volts" in a.ask(QUESTION).citations[0].quote
        assert "7 volts" in b.ask(QUESTION).citations[0].quote
        assert "42 volts" in a.ask(QUESTION).citations[0].quote and "7 volts" in b.ask(QUESTION).citations[0].quote


def test_a_level_with_ttl_zero_is_off(tmp_path: Path) -> None:
    settings = Settings(index_dir=tmp_path / "off", cache_query_ttl=0, cache_retrieval_ttl=0, cache_answer_ttl=0)
    with Citerag.open(settings, create=True) as app:
        app.index_document(Source("notes/flux.md", OLD.encode()))
        app.ask(QUESTION)
        assert app.ask(QUESTION).cache == {"query": False, "retrieval": False, "answer": False}
        assert not app.cache_counts
