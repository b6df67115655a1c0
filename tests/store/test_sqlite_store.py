"""The SQLite store: the store contract, plus schema migrations, readers that never write or wait, and a full disk."""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from contract import DIM, LAN_RANGES, MODEL, ROOT_ACCOUNT, MakeStore, StoreContract, add, save, unit_vectors

from citerag.backends import open_backend
from citerag.errors import CiteragError, StoreUnavailable
from citerag.settings import Settings
from citerag.store import ChunkStats, Store, sqlite_schema
from citerag.store import sqlite as sqlite_store
from citerag.store.sqlite import SqliteStore
from citerag.types import Chunk
from corpus_paths import DATA

INDEXES = DATA / "indexes"


class TestSqliteStore(StoreContract):
    write_error = sqlite3.IntegrityError

    @pytest.fixture()
    def make_store(self, tmp_path: Path) -> Iterator[MakeStore]:
        opened: list[Store] = []

        def make(name: str, create: bool = True) -> Store:
            settings = Settings(index_dir=tmp_path / name)  # the embedded backend: one collection per folder
            opened.append(open_backend(settings).store(settings, create))
            return opened[-1]

        yield make
        for store in opened:
            store.close()


def _db(store: Store) -> sqlite3.Connection:
    return store._db  # type: ignore[attr-defined]


def _meta(path: Path) -> dict[str, str]:
    db = sqlite3.connect(path)
    try:
        return dict(db.execute("SELECT key, value FROM meta").fetchall())
    finally:
        db.close()


def _columns(path: Path, table: str) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
    finally:
        db.close()


def _fixture(version: int, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of the index an older citerag wrote (tests/data/indexes/make_fixtures.py), and what it holds."""
    ix = tmp_path / f"v{version}"
    ix.mkdir()
    shutil.copy(INDEXES / f"v{version}" / "index.sqlite3", ix / "index.sqlite3")
    return ix, json.loads((INDEXES / f"v{version}" / "expected.json").read_text(encoding="utf-8"))


def _assert_holds(store: Store, expected: dict[str, Any]) -> None:
    """Every value the old citerag wrote reads back the same through the current code."""
    docs = {d.source_path: d for d in store.documents()}
    assert sorted(docs) == sorted(e["source_path"] for e in expected["documents"])
    for e in expected["documents"]:
        doc = store.document(docs[e["source_path"]].id)
        assert doc is not None and doc.id == e["id"]
        assert (doc.status, doc.title, doc.sha256, doc.error, doc.stamps, doc.chunk_count) == \
            (e["status"], e["title"], e["sha256"], e["error"], e["stamps"], len(e["chunks"]))
        assert [loc.as_json() for loc in doc.locators] == e["locators"]
        if e["canonical_text"] is not None:
            assert store.canonical_text(doc.id) == e["canonical_text"]
        if e["chunks"]:
            stats = store.chunk_stats()[doc.id]
            assert (stats.tokens, stats.header_tokens) == (e["tokens"], e["header_tokens"])
    snap = store.snapshot(expected["embedding_model"])
    indexed = [e for e in expected["documents"] if e["status"] == "indexed"]
    assert set(snap.documents) == set(snap.texts) == {e["id"] for e in indexed}
    want = [(e["id"], c) for e in sorted(indexed, key=lambda e: e["id"]) for c in e["chunks"]]
    assert [(c.document_id, c.content, c.text, c.section, c.start, c.end) for c in snap.chunks] == \
        [(i, c["content"], c["text"], c["section"], c["start"], c["end"]) for i, c in want]
    for chunk in snap.chunks:
        assert snap.texts[chunk.document_id][chunk.start:chunk.end] == chunk.content
    vectors = np.array([v for e in sorted(indexed, key=lambda e: e["id"]) for v in e["vectors"]], dtype=np.float32)
    np.testing.assert_array_equal(snap.vectors, vectors)


# --- migrations -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_older_index_is_upgraded_in_place_and_keeps_everything(tmp_path: Path, version: int) -> None:
    ix, expected = _fixture(version, tmp_path)
    before = _meta(ix / "index.sqlite3")
    assert before["schema_version"] == str(version) == str(expected["schema_version"])
    store = SqliteStore(ix)
    generation = int(before.get("generation", 0))  # v3 counted its writes; older ones start at 0
    # The change log starts at the upgrade: search indexes older than it rebuild once.
    chunks = sum(len(e["chunks"]) for e in expected["documents"])
    assert _meta(ix / "index.sqlite3") == {"schema_version": "10", "generation": str(generation),
                                           "log_start": str(generation), "next_chunk_id": str(chunks + 1)}
    assert {"locators", "tags", "read_groups"} <= set(_columns(ix / "index.sqlite3", "documents"))
    assert store.conversations("local") == store.labels() == store.experiments() == store.sources() == []
    assert store.generation() == generation
    _assert_holds(store, expected)
    with store.view() as view:
        assert view.changed_documents(generation - 1) is None and view.changed_documents(generation) == []
    # The upgraded index takes writes and serves them next to the old documents.
    doc = add(store, ROOT_ACCOUNT, model=expected["embedding_model"])
    assert store.generation() == generation + 2 and store.locators(doc) == ROOT_ACCOUNT.locators
    with store.view() as view:
        assert view.changed_documents(generation) == [doc]
    assert len(store.snapshot(expected["embedding_model"]).documents) == 3
    store.close()
    assert SqliteStore(ix).generation() == generation + 2  # opened again: current, nothing more to do


def test_the_upgraded_schema_is_the_one_a_new_index_gets(tmp_path: Path) -> None:
    def schema(path: Path) -> dict[str, list[tuple[Any, ...]]]:
        # Column order may differ (ALTER TABLE appends); names, types, NOT NULL, defaults and keys may not.
        db = sqlite3.connect(path)
        try:
            return {t: sorted(tuple(r[1:]) for r in db.execute(f"PRAGMA table_info({t})"))
                    for t in ("meta", "documents", "chunks", "changes")} | \
                {"indexes": db.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'"
                                       " AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()}
        finally:
            db.close()

    SqliteStore(tmp_path / "new", create=True).close()
    ix, _ = _fixture(1, tmp_path)
    SqliteStore(ix).close()
    assert schema(ix / "index.sqlite3") == schema(tmp_path / "new" / "index.sqlite3")


def test_an_upgrade_that_fails_leaves_the_old_index_untouched(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    ix, expected = _fixture(1, tmp_path)

    def broken(db: sqlite3.Connection) -> None:
        db.execute("INSERT INTO meta VALUES ('half', 'done')")
        raise sqlite3.OperationalError("no such function: imaginary")

    monkeypatch.setattr(sqlite_schema, "_MIGRATIONS", [sqlite_schema._MIGRATIONS[0], (3, "broken", broken)])
    with pytest.raises(CiteragError, match="cannot open index"):
        SqliteStore(ix)
    # One transaction: the step that did run (the locators column) is undone with the one that failed.
    assert _meta(ix / "index.sqlite3") == {"schema_version": "1"}
    assert "locators" not in _columns(ix / "index.sqlite3", "documents")
    monkeypatch.undo()
    _assert_holds(SqliteStore(ix), expected)


def test_a_lost_schema_marker_is_read_off_the_columns(tmp_path: Path) -> None:
    ix1, expected1 = _fixture(1, tmp_path)
    db = sqlite3.connect(ix1 / "index.sqlite3")
    db.execute("DROP TABLE meta")  # no marker at all: columns say v1 (no locators)
    db.commit()
    db.close()
    _assert_holds(SqliteStore(ix1), expected1)
    assert _meta(ix1 / "index.sqlite3")["schema_version"] == "10"

    ix2, expected2 = _fixture(2, tmp_path)
    db = sqlite3.connect(ix2 / "index.sqlite3")
    db.execute("DELETE FROM meta")  # table there, row gone: columns say v2 (locators kept, not re-added)
    db.commit()
    db.close()
    _assert_holds(SqliteStore(ix2), expected2)
    assert _meta(ix2 / "index.sqlite3") == {"schema_version": "10", "generation": "0", "log_start": "0",
                                            "next_chunk_id": "11"}

    ix3, expected3 = _fixture(3, tmp_path)
    db = sqlite3.connect(ix3 / "index.sqlite3")
    db.execute("DELETE FROM meta WHERE key = 'schema_version'")  # the generation row says v3
    db.commit()
    db.close()
    _assert_holds(SqliteStore(ix3), expected3)
    assert _meta(ix3 / "index.sqlite3") == {"schema_version": "10", "generation": "6", "log_start": "6",
                                            "next_chunk_id": "11"}


def test_a_newer_index_asks_for_a_newer_citerag(tmp_path: Path) -> None:
    ix = tmp_path / "ix"
    SqliteStore(ix, create=True).close()
    db = sqlite3.connect(ix / "index.sqlite3")
    db.execute("UPDATE meta SET value = '11' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(CiteragError) as info:
        SqliteStore(ix)
    assert str(info.value) == (f"the index at {ix} has schema version 11, this citerag knows up to 10: "
                               "upgrade citerag")
    assert _meta(ix / "index.sqlite3")["schema_version"] == "11"


def test_an_empty_database_is_a_new_index_only_when_creating(tmp_path: Path) -> None:
    ix = tmp_path / "ix"
    ix.mkdir()
    (ix / "index.sqlite3").write_bytes(b"")
    with pytest.raises(CiteragError, match="no index at .*empty database"):
        SqliteStore(ix)
    assert (ix / "index.sqlite3").stat().st_size == 0
    store = SqliteStore(ix, create=True)
    assert store.documents() == [] and \
        _meta(ix / "index.sqlite3") == {"schema_version": "10", "generation": "0", "log_start": "0",
                                        "next_chunk_id": "1"}


def test_unreadable_index_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CiteragError, match="no index at"):
        SqliteStore(tmp_path / "missing")
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(CiteragError, match="not a directory"):
        SqliteStore(tmp_path / "file", create=True)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "index.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(CiteragError, match="cannot open index"):
        SqliteStore(tmp_path / "corrupt")
    (tmp_path / "other").mkdir()
    db = sqlite3.connect(tmp_path / "other" / "index.sqlite3")
    db.execute("CREATE TABLE songs (title TEXT)")
    db.close()
    with pytest.raises(CiteragError, match="not a citerag index"):
        SqliteStore(tmp_path / "other", create=True)


# --- readers ---------------------------------------------------------------------------------------------------


def _file_state(ix: Path) -> tuple[str, int]:
    wal = ix / "index.sqlite3-wal"
    return hashlib.sha256((ix / "index.sqlite3").read_bytes()).hexdigest(), wal.stat().st_size if wal.exists() else 0


def test_readers_never_write_and_never_wait_for_a_writer(tmp_path: Path) -> None:
    ix = tmp_path / "ix"
    store = SqliteStore(ix, create=True)
    add(store, ROOT_ACCOUNT)
    store.close()  # the last connection checkpoints: everything is in the main file now
    before = _file_state(ix)
    writer = sqlite3.connect(ix / "index.sqlite3", isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # an indexer in the middle of a document
    try:
        started = time.monotonic()
        # With a short busy timeout, any write on open (a meta insert, CREATE TABLE, a journal mode change)
        # would fail with "database is locked" instead of passing.
        reader = SqliteStore(ix, busy_timeout=0.2)
        assert [d.source_path for d in reader.documents()] == [ROOT_ACCOUNT.path]
        snap = reader.snapshot(MODEL)
        assert len(snap.chunks) == len(ROOT_ACCOUNT.chunks) and reader.generation() == snap.generation == 2
        assert time.monotonic() - started < 0.2
        assert _file_state(ix) == before
        # Writing does wait for the writer, then says the store is unavailable rather than failing the document.
        with pytest.raises(StoreUnavailable, match=f"cannot write the index at {ix / 'index.sqlite3'}: "
                                                   "database is locked"):
            reader.add_pending("/docs/x.md", "x.md", "s")
        reader.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_every_connection_waits_for_a_busy_writer(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    assert _db(store).execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    assert _db(store).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert _db(SqliteStore(tmp_path / "ix")).execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


def test_a_snapshot_is_one_commit_even_while_the_indexer_commits(tmp_path: Path) -> None:
    ix = tmp_path / "ix"
    store = SqliteStore(ix, create=True)
    doc = add(store, ROOT_ACCOUNT)
    indexer = SqliteStore(ix)
    statements: list[str] = []

    def commit_in_between(sql: str) -> None:
        # Just as the snapshot starts reading chunks, another process replaces the document's version.
        statements.append(sql)
        if "FROM chunks" in sql and len(statements) < 10:
            save(indexer, doc, LAN_RANGES, sha256="s2")

    _db(store).set_trace_callback(commit_in_between)
    snap = store.snapshot(MODEL)
    _db(store).set_trace_callback(None)
    assert indexer.canonical_text(doc) == LAN_RANGES.text  # the commit did land mid-snapshot
    assert snap.texts[doc] == ROOT_ACCOUNT.text and snap.generation == 2
    assert [c.content for c in snap.chunks] == [c.content for c in ROOT_ACCOUNT.chunks]
    for chunk in snap.chunks:
        assert snap.texts[chunk.document_id][chunk.start:chunk.end] == chunk.content
    after = store.snapshot(MODEL)
    assert after.generation == 3 and after.texts[doc] == LAN_RANGES.text
    assert [c.content for c in after.chunks] == [c.content for c in LAN_RANGES.chunks]


# --- the environment -------------------------------------------------------------------------------------------


def _chapter(name: str) -> tuple[str, list[Chunk]]:
    text = (DATA / "markdown" / "debian-reference" / name).read_text(encoding="utf-8")
    chunks: list[Chunk] = []
    cursor = 0
    for para in (p.strip() for p in text.split("\n\n")):
        if para:
            start = text.index(para, cursor)
            cursor = start + len(para)
            chunks.append(Chunk(para, para, "", start, cursor))
    return text, chunks


def test_a_full_disk_stops_the_write_and_keeps_the_old_version(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    doc = add(store, ROOT_ACCOUNT)
    before, generation = store.snapshot(MODEL), store.generation()
    text, chunks = _chapter("ch01.md")
    assert len(chunks) > 200
    vectors = unit_vectors(len(chunks), seed=5)

    def save_chapter() -> None:
        store.save_indexed(doc, title="Chapter 1", sha256="s2", stamps={"embedding_model": MODEL},
                           canonical_text=text, warnings=[], chunks=chunks, vectors=vectors,
                           stats=ChunkStats([9] * len(chunks), [0] * len(chunks)))

    db = _db(store)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages + 2}")  # a disk with two pages left
    with pytest.raises(StoreUnavailable) as info:
        save_chapter()
    assert str(info.value) == f"cannot write the index at {tmp_path / 'ix' / 'index.sqlite3'}: database or disk is full"
    assert isinstance(info.value, CiteragError) and not db.in_transaction
    after = store.snapshot(MODEL)
    assert store.generation() == generation == after.generation
    assert [c.content for c in after.chunks] == [c.content for c in before.chunks]
    assert after.texts == before.texts and store.document(doc).status == "indexed"  # type: ignore[union-attr]
    np.testing.assert_array_equal(after.vectors, before.vectors)
    # Space freed: the same write goes through.
    db.execute("PRAGMA max_page_count = 1073741823")
    save_chapter()
    snap = store.snapshot(MODEL)
    assert len(snap.chunks) == len(chunks) and snap.vectors.shape == (len(chunks), DIM)
    assert snap.texts[doc] == text and store.generation() == generation + 1


def test_a_read_only_store_is_unavailable_not_a_bug(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    doc = add(store, ROOT_ACCOUNT)
    _db(store).execute("PRAGMA query_only = ON")  # what a read-only file or mount does to every write
    with pytest.raises(StoreUnavailable, match="attempt to write a readonly database"):
        store.set_error(doc, "x")
    with pytest.raises(StoreUnavailable, match="readonly"):
        save(store, doc, LAN_RANGES)
    assert store.canonical_text(doc) == ROOT_ACCOUNT.text and store.document(doc).error is None  # type: ignore[union-attr]


def test_which_errors_are_the_environment() -> None:
    cause = sqlite_store._environment_cause
    assert cause(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert cause(sqlite3.OperationalError("disk I/O error")) == "disk I/O error"
    assert cause(sqlite3.OperationalError("unable to open database file")) == "unable to open database file"
    # Bugs stay bugs.
    assert cause(sqlite3.IntegrityError("NOT NULL constraint failed: chunks.content")) is None
    assert cause(sqlite3.OperationalError("no such column: locators")) is None
    assert cause(OSError(errno.ENOENT, "No such file or directory")) is None
