"""HNSW graphs built off the write path (index/hnsw_build.py): the save that finds a graph due returns while it is
built, searches stay exact on the old graph and the delta meanwhile, and a later save adopts the new graph on top
of whatever was saved since (or drops it when the index changed under it). Real usearch, real SQLite stores;
builds run in the background at any size here (SYNC_BUILD_ROWS 0) and are held after writing their file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from index_contract import unit
from test_sync import MODEL, add_document, truth

from citerag.app.home import Citerag
from citerag.index import hnsw_build, sync
from citerag.index.analyzer import Analyzer
from citerag.index.hnsw import HnswIndex
from citerag.index.local import LocalSearch
from citerag.settings import Settings
from citerag.store import Store
from citerag.store.sqlite import SqliteStore
from fakes import HashEncoder

CHILD = Path(__file__).with_name("hnsw_child.py")


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Background builds wait after writing their file until the test sets this."""
    gate = threading.Event()
    monkeypatch.setattr(hnsw_build, "release", gate)
    yield gate
    gate.set()
    for build in list(hnsw_build._builds.values()):
        if build.state != hnsw_build.PENDING:
            build.wait(60)
        hnsw_build.take(build)
        build.discard()


def start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, Path, sync.SearchIndexes, str]:
    """Three documents (120 chunks) saved with a graph built inside the save; from then on builds run in the
    background. The graph file's name is returned."""
    store = SqliteStore(tmp_path / "ix", create=True)
    for seed in range(3):
        add_document(store, 40, seed * 40, seed)
    directory = sync.index_dir(tmp_path / "ix", MODEL, "hnsw")
    indexes = sync.persist(sync.load(directory, MODEL, "hnsw"), store)
    assert len(vector(indexes).graph_ids) == 120 and not len(vector(indexes).delta_rows())
    monkeypatch.setattr(hnsw_build, "SYNC_BUILD_ROWS", 0)
    return store, directory, indexes, manifest(directory)["vector"]["graph"]


def vector(indexes: sync.SearchIndexes) -> HnswIndex:
    assert isinstance(indexes.vector, HnswIndex)
    return indexes.vector


def manifest(directory: Path) -> dict[str, Any]:
    state: dict[str, Any] = json.loads((directory / sync.MANIFEST).read_text())
    return state


def doc_ids(index: HnswIndex, doc: int) -> set[int]:
    rows = index.exact.rows
    return set(rows.ids[(rows.documents == doc) & rows.live].tolist())


def assert_exact(index: HnswIndex, store: Store, exact: bool = True) -> None:
    """Each query's top 10 with exact cosines; `exact`: the same ids as a brute-force scan (a graph over the
    old 120 chunks and an exact delta is), else recall ≥ 0.95 (a graph of hundreds of random 32-d vectors)."""
    vectors, _ = truth(store)
    ids = np.array(sorted(vectors))
    matrix = np.stack([vectors[i] for i in ids])
    found = 0
    for seed in range(30):
        q = unit(1, 900 + seed)[0]
        got, sims = index.search(q, 10)
        want = ids[np.lexsort((ids, -(matrix @ q)))[:10]]
        assert set(got.tolist()) <= set(vectors)  # nothing removed comes back
        np.testing.assert_allclose(sims, [vectors[i] @ q for i in got.tolist()], atol=1e-6)
        if exact:
            assert got.tolist() == want.tolist()
        found += len(set(got.tolist()) & set(want.tolist()))
    assert found / 300 >= 0.95


def assert_clean(directory: Path) -> None:
    """Nothing in the folder that the manifest does not name, and no build of this process left over."""
    assert sync._files(manifest(directory)) >= {p.name for p in directory.iterdir()}
    assert hnsw_build.current(directory) is None


def test_searches_stay_exact_while_the_graph_builds_and_it_holds_everything_once_adopted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: threading.Event) -> None:
    store, directory, indexes, old_graph = start(tmp_path, monkeypatch)
    add_document(store, 300, 0, 10)  # past DELTA_ROWS: the save starts a build of 420 vectors and returns
    indexes = sync.persist(indexes, store)
    build = hnsw_build.current(directory)
    assert build is not None and build.running
    assert manifest(directory)["vector"]["graph"] == old_graph and len(vector(indexes).delta_rows()) == 300
    snapshot = set(vector(indexes).exact.rows.ids[vector(indexes).exact.rows.live].tolist())
    removed = doc_ids(vector(indexes), 2)
    store.delete(2)  # a document the build holds, removed meanwhile
    added = add_document(store, 20, 50, 11)  # and one it does not know
    indexes = sync.persist(indexes, store)
    assert hnsw_build.current(directory) is build and build.running  # one build at a time
    assert_exact(vector(indexes), store)
    assert_exact(vector(sync.load(directory, MODEL, "hnsw")), store)  # a reader of the saved state too
    held.set()
    assert build.wait(60) and build.state == hnsw_build.DONE
    indexes = sync.persist(indexes, store)  # nothing new in the store: the save adopts the graph
    index = vector(indexes)
    assert manifest(directory)["vector"]["graph"] == build.name != old_graph
    assert build.name.startswith("hnsw-graph-")  # renamed when adopted: a clean-up no longer spares it
    assert set(index.graph_ids.tolist()) == snapshot
    assert set(index.graph_ids[~index.graph_live].tolist()) == removed
    assert set(index.exact.rows.ids[index.delta_rows()].tolist()) == doc_ids(index, added)
    assert_exact(index, store, exact=False)
    assert_exact(vector(sync.load(directory, MODEL, "hnsw")), store, exact=False)
    assert_clean(directory)


def test_a_long_lived_process_adopts_the_graph_when_it_is_built_and_close_waits_for_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: threading.Event) -> None:
    store = SqliteStore(tmp_path / "ix", create=True)
    for seed in range(3):
        add_document(store, 40, seed * 40, seed)
    local = LocalSearch(tmp_path / "ix", MODEL, "hnsw")
    local.persist(store)
    monkeypatch.setattr(hnsw_build, "SYNC_BUILD_ROWS", 0)
    add_document(store, 300, 0, 10)
    local.persist(store)
    build = hnsw_build.current(local.directory)
    assert build is not None and build.running
    held.set()
    assert build.wait(60)
    # Adopted from the build's thread, through the backend's own save: no write was needed.
    assert manifest(local.directory)["vector"]["graph"] == build.name
    assert local.indexes is not None and vector(local.indexes).graph is not None
    assert len(vector(local.indexes).graph_ids) == 420 and not len(vector(local.indexes).delta_rows())
    assert_clean(local.directory)
    held.clear()
    add_document(store, 300, 60, 12)
    local.persist(store)
    second = hnsw_build.current(local.directory)
    assert second is not None and second.running
    closing = threading.Thread(target=local.close, args=(store,))
    closing.start()
    closing.join(0.5)
    assert closing.is_alive()  # waiting for the build
    held.set()
    closing.join(60)
    assert not closing.is_alive()
    assert manifest(local.directory)["vector"]["graph"] == second.name
    assert_clean(local.directory)


@pytest.mark.parametrize("meanwhile", ["appended", "compacted"])
def test_a_graph_is_adopted_on_top_of_what_another_writer_saved_or_dropped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: threading.Event, meanwhile: str) -> None:
    store, directory, first, old_graph = start(tmp_path, monkeypatch)
    add_document(store, 300, 0, 10)
    first = sync.persist(first, store)
    build = hnsw_build.current(directory)
    assert build is not None and build.running
    removed = doc_ids(vector(first), 1)
    # Another writer's state saves first: it removes a document the build holds and adds one; or it removes the
    # 300 chunks, which compacts the exact vectors into a new file, where the build's row numbers mean nothing.
    other = sync.load(directory, MODEL, "hnsw")
    store.delete(1 if meanwhile == "appended" else 4)
    added = add_document(store, 20, 50, 11)
    other = sync.persist(other, store)
    held.set()
    assert build.wait(60) and build.state == hnsw_build.DONE
    first = sync.persist(first, store)  # stale: it loads the other's state, then adopts or drops the graph
    assert first.token != other.token
    index = vector(first)
    if meanwhile == "appended":
        assert manifest(directory)["vector"]["graph"] == build.name
        assert set(index.graph_ids[~index.graph_live].tolist()) == removed
        assert set(index.exact.rows.ids[index.delta_rows()].tolist()) == doc_ids(index, added)
        assert_exact(index, store, exact=False)
    else:
        assert manifest(directory)["vector"]["graph"] == old_graph and not (directory / build.name).exists()
        assert_exact(index, store)
    assert_clean(directory)


def run_child(mode: str, root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CHILD), mode, str(root), MODEL], stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


def test_a_graph_another_process_adopted_first_wins(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: threading.Event) -> None:
    store, directory, first, old_graph = start(tmp_path, monkeypatch)
    add_document(store, 300, 0, 10)
    first = sync.persist(first, store)
    build = hnsw_build.current(directory)
    assert build is not None and build.running
    child = run_child("persist", tmp_path / "ix")  # builds its own graph inside its save (300 rows)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == 0, out
    theirs = manifest(directory)["vector"]["graph"]
    assert theirs not in (old_graph, build.name)
    held.set()
    assert build.wait(60) and build.state == hnsw_build.DONE
    first = sync.persist(first, store)  # ours was built on the old graph: dropped, theirs kept
    assert manifest(directory)["vector"]["graph"] == theirs and not (directory / build.name).exists()
    assert_exact(vector(first), store, exact=False)
    assert_clean(directory)


def test_a_process_killed_mid_build_leaves_the_saved_state_and_the_next_one_completes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, directory, _, old_graph = start(tmp_path, monkeypatch)
    add_document(store, 300, 0, 10)
    child = run_child("hang", tmp_path / "ix")  # saves, starts the build, and is killed once it wrote its file
    assert child.stdout is not None
    line = child.stdout.readline().split()
    try:
        assert line[:1] == ["held"], line
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
    leftover = directory / line[1]
    assert leftover.exists() and leftover.name.startswith(f"{hnsw_build.BUILD_PREFIX}{child.pid}-")
    reader = sync.load(directory, MODEL, "hnsw")  # the state the child saved before its build: consistent
    assert reader.generation == store.generation()
    assert manifest(directory)["vector"]["graph"] == old_graph and len(vector(reader).delta_rows()) == 300
    assert_exact(vector(reader), store)
    # The next process: its first save (nothing new in the store) starts the build the dead one did not finish.
    indexes = sync.persist(reader, store)
    assert not leftover.exists()  # a dead process's build file goes with that save
    build = hnsw_build.current(directory)
    assert build is not None
    assert build.wait(60) and build.state == hnsw_build.DONE
    indexes = sync.persist(indexes, store)
    assert manifest(directory)["vector"]["graph"] == build.name
    assert len(vector(indexes).graph_ids) == 420 and not len(vector(indexes).delta_rows())
    assert_exact(vector(indexes), store, exact=False)
    assert_clean(directory)


def test_a_build_file_is_stale_only_once_its_process_is_gone(tmp_path: Path) -> None:
    mine = tmp_path / f"{hnsw_build.BUILD_PREFIX}{os.getpid()}-0123456789ab.usearch"
    mine.write_bytes(b"")
    assert hnsw_build.stale(mine)  # this process has no build of that name
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = tmp_path / f"{hnsw_build.BUILD_PREFIX}{child.pid}-0123456789ab.usearch"
        theirs.write_bytes(b"")
        assert not hnsw_build.stale(theirs)
    finally:
        child.kill()
        child.wait()
    assert hnsw_build.stale(theirs)


def test_a_build_starts_only_once_the_manifest_of_its_snapshot_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its rows lie past the previous manifest's count of the vectors file: a save cut short before its manifest
    must not leave a build reading rows that the next writer, taking over from that manifest, truncates."""
    store, directory, indexes, _ = start(tmp_path, monkeypatch)
    add_document(store, 300, 0, 10)
    with store.view() as view:
        indexes.catch_up(view)
    vector(indexes).save(directory)  # the vector index's part of a save whose manifest never comes
    assert hnsw_build.current(directory) is None
    assert not [p for p in directory.iterdir() if p.name.startswith(hnsw_build.BUILD_PREFIX)]
    indexes = sync.persist(sync.load(directory, MODEL, "hnsw"), store)  # the next writer: stages and launches
    build = hnsw_build.current(directory)
    assert build is not None and build.wait(60) and build.state == hnsw_build.DONE
    indexes = sync.persist(indexes, store)
    assert manifest(directory)["vector"]["graph"] == build.name and not len(vector(indexes).delta_rows())
    assert_clean(directory)


def test_closing_a_collection_waits_for_its_graph_build_and_saves_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: threading.Event, small_corpus: Path) -> None:
    """The CLI's case: `citerag ingest` returns its documents committed and exits through Collection.close, which
    waits for the graph its save started instead of leaving it to be built again by the next process."""
    monkeypatch.setattr(hnsw_build, "SYNC_BUILD_ROWS", 0)
    app = Citerag()
    app.register_encoder(HashEncoder())
    app.open_collection(Settings(index_dir=tmp_path / "ix", embedding_model="hash-64", vector_index="hnsw"),
                        create=True)
    report = app.ingest([small_corpus])
    assert report.indexed and not report.failed
    directory = sync.index_dir(tmp_path / "ix", "hash-64", "hnsw")
    build = hnsw_build.current(directory)
    assert build is not None and build.running and manifest(directory)["vector"]["graph"] is None
    closing = threading.Thread(target=app.close)
    closing.start()
    closing.join(0.5)
    assert closing.is_alive()
    held.set()
    closing.join(60)
    assert not closing.is_alive()
    assert manifest(directory)["vector"]["graph"] == build.name
    reopened = vector(sync.load(directory, "hash-64", "hnsw", Analyzer(Settings().lexical)))
    assert len(reopened.graph_ids) == len(reopened) and not len(reopened.delta_rows())
    assert_clean(directory)
