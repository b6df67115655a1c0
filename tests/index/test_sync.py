"""Search indexes follow the store: caught up per document from its change log, saved under a lock, rebuilt
only when the log cannot bridge the gap; a process that saved first is never overwritten by a stale one."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from index_contract import BM25_FIXTURE, DIM, unit

from citerag.index import sync
from citerag.store import ChunkStats, Store
from citerag.store.sqlite import SqliteStore
from citerag.types import Chunk

MODEL = "test-encoder-32d"
TEXTS = BM25_FIXTURE["docs"]


def add_document(store: Store, n: int, first_text: int, seed: int, path: str | None = None) -> int:
    texts = [TEXTS[(first_text + i) % len(TEXTS)] for i in range(n)]  # a text may recur in another document
    canonical = "\n\n".join(texts)
    chunks, at = [], 0
    for t in texts:
        chunks.append(Chunk(t, t, "section", at, at + len(t)))
        at += len(t) + 2
    existing = store.document_by_path(path) if path else None
    doc_id = existing.id if existing else store.add_pending(path or f"/docs/{seed}.md", f"{seed}.md", "s")
    store.save_indexed(doc_id, title="t", sha256=f"s{seed}", stamps={"embedding_model": MODEL},
                       canonical_text=canonical, warnings=[], chunks=chunks, vectors=unit(n, seed),
                       stats=ChunkStats([1] * n, [0] * n))
    return doc_id


def truth(store: Store) -> tuple[dict[int, np.ndarray], dict[int, str]]:
    snap = store.snapshot(MODEL)
    return {c.id: snap.vectors[i] for i, c in enumerate(snap.chunks)}, {c.id: c.text for c in snap.chunks}


def assert_matches_store(indexes: sync.SearchIndexes, store: Store) -> None:
    vectors, texts = truth(store)
    assert indexes.generation == store.generation()
    assert len(indexes) == len(vectors) == len(indexes.lexical)
    q = unit(1, 1234)[0]
    ids = np.array(sorted(vectors))
    sims = np.stack([vectors[i] for i in ids]) @ q
    assert indexes.vector is not None
    assert indexes.vector.search(q, 5)[0].tolist() == ids[np.lexsort((ids, -sims))[:5]].tolist()
    word = "debian"
    assert set(indexes.lexical.search(word, 10_000)[0].tolist()) == {i for i, t in texts.items() if word in t.lower()}


@pytest.fixture(params=["exact", "hnsw"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_second_process_catches_up_from_the_change_log(tmp_path: Path, kind: str) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    for seed in range(3):
        add_document(store, 40, seed * 40, seed)
    directory = sync.index_dir(tmp_path / "ix", MODEL, kind)
    first = sync.persist(sync.load(directory, MODEL, kind), store)
    assert_matches_store(first, store)
    replaced = add_document(store, 30, 150, 7, path="/docs/1.md")  # a new version of document 2
    store.delete(1)
    added = add_document(store, 20, 200, 9)
    other = sync.load(directory, MODEL, kind)  # another process opening the saved indexes
    with store.view() as view:
        assert other.catch_up(view) == 3  # three documents re-read, not the whole collection
    assert {replaced, added} <= {2, 4}
    assert_matches_store(other, store)


def test_persist_builds_on_what_another_process_saved(tmp_path: Path, kind: str) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    add_document(store, 40, 0, 0)
    directory = sync.index_dir(tmp_path / "ix", MODEL, kind)
    a = sync.persist(sync.load(directory, MODEL, kind), store)
    b = sync.load(directory, MODEL, kind)
    add_document(store, 300, 40, 1)
    b = sync.persist(b, store)  # process B saves first
    add_document(store, 20, 100, 2)
    a = sync.persist(a, store)  # A's state is stale: it must start from B's files, not append over them
    assert a.token != b.token
    assert_matches_store(a, store)
    assert_matches_store(sync.load(directory, MODEL, kind), store)
    assert_matches_store(b, store) if b.generation == store.generation() else None
    with store.view() as view:
        b.catch_up(view)  # B's loaded files were not changed under it
    assert_matches_store(b, store)
    manifest = json.loads((directory / "manifest.json").read_text())
    on_disk = {p.name for p in directory.iterdir()}
    assert sync._files(manifest) >= on_disk  # nothing left behind that no manifest names


def test_without_a_change_log_back_far_enough_it_rebuilds(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    add_document(store, 40, 0, 0)
    directory = sync.index_dir(tmp_path / "ix", MODEL, "exact")
    indexes = sync.persist(sync.load(directory, MODEL, "exact"), store)
    add_document(store, 40, 40, 1)
    with sqlite3.connect(tmp_path / "ix" / "index.sqlite3") as db:  # as after an upgrade from schema 3
        db.execute("UPDATE meta SET value = (SELECT value FROM meta WHERE key = 'generation') WHERE key = 'log_start'")
    with store.view() as view:
        assert indexes.catch_up(view) == -1
    assert_matches_store(indexes, store)


def test_an_unreadable_manifest_means_a_rebuild_not_an_error(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    add_document(store, 40, 0, 0)
    directory = sync.index_dir(tmp_path / "ix", MODEL, "hnsw")
    sync.persist(sync.load(directory, MODEL, "hnsw"), store)
    (directory / "manifest.json").write_text("{not json")
    indexes = sync.load(directory, MODEL, "hnsw")
    assert indexes.generation == -1
    indexes = sync.persist(indexes, store)
    assert_matches_store(indexes, store)
    assert indexes.vector.dim == DIM  # type: ignore[union-attr]
