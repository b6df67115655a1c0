"""The PostgreSQL store: the shared contract, plus what only a shared database has to prove (many collections
in one database, migrations applied once by concurrent starts, a streaming replica that lags)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from contract import LAN_RANGES, MODEL, MTU, ROOT_ACCOUNT, MakeStore, StoreContract, add, save

from citerag.backends import open_backend
from citerag.errors import CiteragError, StoreUnavailable
from citerag.settings import Settings
from citerag.store import Store
from citerag.store.pg_migrate import migrations
from citerag.types import Turn

psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL extra is missing: pip install -e '.[dev]'")


def open_pg(url: str, create: bool = False, *, collection: str = "default", read_url: str = "") -> Store:
    """A collection's store, as the backend bundle opens it for these settings."""
    settings = Settings(store_url=url, collection=collection, store_read_url=read_url, lexical="reference")
    return open_backend(settings).store(settings, create)


class TestPostgresStore(StoreContract):
    write_error = psycopg.errors.NotNullViolation

    @pytest.fixture()
    def make_store(self, pg_url: str) -> Iterator[MakeStore]:
        opened: list[Store] = []

        def make(name: str, create: bool = True) -> Store:
            opened.append(open_pg(pg_url, create=create, collection=name))
            return opened[-1]

        yield make
        for store in opened:
            store.close()


def _rows(url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, args).fetchall()  # type: ignore[arg-type]


def test_two_collections_in_one_database_never_see_each_other(pg_url: str) -> None:
    team_a = open_pg(pg_url, create=True, collection="team-a")
    team_b = open_pg(pg_url, create=True, collection="team-b")
    a_doc = add(team_a, ROOT_ACCOUNT)
    b_doc = add(team_b, LAN_RANGES)
    # Same source path in both: each collection has its own document.
    b_same = add(team_b, ROOT_ACCOUNT)
    assert [d.name for d in team_a.documents()] == [ROOT_ACCOUNT.name]
    assert team_a.document(b_doc) is None and team_b.document(a_doc) is None
    assert team_a.document_by_path(ROOT_ACCOUNT.path).id == a_doc  # type: ignore[union-attr]
    assert team_b.document_by_path(ROOT_ACCOUNT.path).id == b_same  # type: ignore[union-attr]
    with pytest.raises(CiteragError):
        team_a.canonical_text(b_doc)
    snap_a, snap_b = team_a.snapshot(MODEL), team_b.snapshot(MODEL)
    assert set(snap_a.documents) == {a_doc} and set(snap_b.documents) == {b_doc, b_same}
    b_chunk_ids = [c.id for c in snap_b.chunks]
    with team_a.view() as view:  # ids of another collection are not found, even asked for directly
        assert view.chunks(b_chunk_ids) == {} and view.documents([b_doc]) == {} and view.texts([b_doc]) == {}
        assert sum(len(b) for b in view.indexed_chunks(MODEL)) == len(ROOT_ACCOUNT.chunks)
    # Writes through one collection cannot touch the other's documents.
    team_a.delete(b_doc)
    team_a.set_error(b_doc, "not yours")
    assert team_b.document(b_doc).status == "indexed" and team_b.document(b_doc).error is None  # type: ignore[union-attr]
    with pytest.raises(CiteragError):
        save(team_a, b_doc, MTU)
    assert len(team_b.snapshot(MODEL).chunks) == len(snap_b.chunks)
    # Generations are per collection.
    before = team_b.generation()
    add(team_a, MTU)
    assert team_b.generation() == before
    # Dropping a collection removes every row of it, search rows and conversations included, and nothing of the other.
    team_a.add_turn("a-talk", "key-a", Turn("What is root?", "What is root?", "", True, []))
    team_b.add_turn("b-talk", "key-b", Turn("What is an MTU?", "What is an MTU?", "", True, []))
    team_a.drop_collection()  # type: ignore[attr-defined]
    assert _rows(pg_url, "SELECT count(*) FROM turns WHERE conversation_id = 'a-talk'")[0][0] == 0
    assert team_b.conversation("b-talk") is not None
    for table in ("documents", "chunks", "chunk_vectors", "lexical_chunks", "bm25_segments", "bm25_terms",
                  "bm25_removed", "changes", "conversations"):
        left = _rows(pg_url, f"SELECT count(*) FROM {table} WHERE collection_id = %s",
                     team_a.collection_id)[0][0]  # type: ignore[attr-defined]
        assert left == 0, table
    assert len(team_b.snapshot(MODEL).chunks) == len(snap_b.chunks)
    team_a.close()
    team_b.close()


def test_concurrent_first_starts_apply_the_schema_once(pg_url: str) -> None:
    """N API processes and M workers starting at once against an empty database."""
    stores: list[Store] = []
    errors: list[BaseException] = []

    def start(i: int) -> None:
        try:
            stores.append(open_pg(pg_url, create=True, collection="shared"))
        except BaseException as exc:  # noqa: BLE001 - every failure counts
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    shipped = [(version,) for version, _name, _sql in migrations()]
    assert _rows(pg_url, "SELECT version FROM citerag_schema ORDER BY version") == shipped
    assert _rows(pg_url, "SELECT count(*) FROM collections") == [(1,)]
    for store in stores:
        store.close()


def test_a_newer_schema_is_refused_with_one_line(pg_url: str) -> None:
    open_pg(pg_url, create=True).close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO citerag_schema (version, name) VALUES (99, '0099_future.sql')")
    with pytest.raises(CiteragError, match="schema version 99.*upgrade citerag"):
        open_pg(pg_url)


def test_a_missing_collection_is_not_created_by_a_reader(pg_url: str) -> None:
    open_pg(pg_url, create=True, collection="one").close()
    with pytest.raises(CiteragError, match="no collection 'two'"):
        open_pg(pg_url, create=False, collection="two")
    assert _rows(pg_url, "SELECT name FROM collections") == [("one",)]


def test_a_server_that_is_down_is_store_unavailable(pg_server) -> None:  # type: ignore[no-untyped-def]
    from citerag.local_postgres import free_port

    url = f"postgresql://postgres:secret@127.0.0.1:{free_port()}/nothing"
    with pytest.raises(StoreUnavailable) as caught:
        open_pg(url, create=True)
    assert "secret" not in str(caught.value) and "127.0.0.1" in str(caught.value)


def test_a_lagging_replica_serves_whole_commits_only(pg_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Reads go to a streaming replica. While it lags (replay paused), a reader sees the older commit whole:
    never a document without its chunks, its vectors or its postings; once replay resumes, the new one whole."""
    from citerag.local_postgres import LocalPostgres

    primary_url = pg_server.create_database("replicated")
    store = open_pg(primary_url, create=True, collection="docs")
    first = add(store, ROOT_ACCOUNT)
    with LocalPostgres(tmp_path / "replica", primary=pg_server) as replica:
        reader = open_pg(primary_url, collection="docs", read_url=replica.url("replicated"))
        _wait_for(lambda: _generation(reader) == store.generation())
        with psycopg.connect(replica.url("replicated"), autocommit=True) as control:
            control.execute("SELECT pg_wal_replay_pause()")
            try:
                second = add(store, LAN_RANGES)
                save(store, first, MTU, sha256="s2")  # a replacement, swapped in one transaction
                snap = reader.snapshot(MODEL)
                assert set(snap.documents) == {first} and snap.generation < store.generation()
                assert [c.content for c in snap.chunks] == [c.content for c in ROOT_ACCOUNT.chunks]
                _assert_whole(reader)
            finally:
                control.execute("SELECT pg_wal_replay_resume()")
        _wait_for(lambda: _generation(reader) == store.generation())
        snap = reader.snapshot(MODEL)
        assert set(snap.documents) == {first, second}
        assert {c.content for c in snap.chunks if c.document_id == first} == {c.content for c in MTU.chunks}
        _assert_whole(reader)
        # The replica refuses writes; the store writes to the primary only.
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction), \
                psycopg.connect(replica.url("replicated")) as conn:
            conn.execute("CREATE TABLE nope (x int)")
        reader.close()
    store.close()


def _generation(store: Store) -> int:
    with store.view() as view:
        return view.generation


def _assert_whole(store: Store) -> None:
    """In one view: every indexed document's chunks agree with its text and each has its vector and length row."""
    with store.view() as view:
        conn = view.conn  # type: ignore[attr-defined]
        cid = view.collection_id  # type: ignore[attr-defined]
        docs = conn.execute("SELECT id, chunk_count, canonical_text FROM documents WHERE collection_id = %s"
                            " AND status = 'indexed'", (cid,)).fetchall()
        for doc_id, count, text in docs:
            rows = conn.execute("SELECT c.content, c.start_offset, c.end_offset,"
                                " (SELECT count(*) FROM chunk_vectors v WHERE v.collection_id = c.collection_id"
                                "  AND v.chunk_id = c.id),"
                                " (SELECT count(*) FROM lexical_chunks l WHERE l.collection_id = c.collection_id"
                                "  AND l.chunk_id = c.id)"
                                " FROM chunks c WHERE c.collection_id = %s AND c.document_id = %s",
                                (cid, doc_id)).fetchall()
            assert len(rows) == count
            for content, start, end, vectors, lengths in rows:
                assert text[start:end] == content and vectors == 1 and lengths == 1


def _wait_for(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the replica did not catch up within 30 s"
        time.sleep(0.05)


def test_vectors_round_trip_as_float32(pg_url: str) -> None:
    store = open_pg(pg_url, create=True)
    add(store, ROOT_ACCOUNT)
    snap = store.snapshot(MODEL)
    assert snap.vectors.dtype == np.float32
    np.testing.assert_array_equal(snap.vectors, ROOT_ACCOUNT.vectors)
    store.close()
