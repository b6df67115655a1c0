"""The SQLite store: one transaction per document, unit vectors, snapshots per embedding model."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from citerag.errors import CiteragError
from citerag.store import ChunkStats, open_store
from citerag.types import Chunk


def _unit(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _save(store, doc_id: int, chunks: list[Chunk], model: str = "m") -> None:  # type: ignore[no-untyped-def]
    store.save_indexed(doc_id, title="T", sha256="s", stamps={"embedding_model": model},
                       canonical_text="alpha beta gamma", warnings=[], chunks=chunks, vectors=_unit(len(chunks)),
                       stats=ChunkStats([5] * len(chunks), [0] * len(chunks)))


def test_a_failing_write_leaves_the_previous_version_whole(tmp_path: Path) -> None:
    store = open_store(tmp_path / "ix", create=True)
    doc = store.add_pending("/docs/a.md", "a.md", "s0")
    _save(store, doc, [Chunk("alpha", "alpha", "", 0, 5), Chunk("beta", "beta", "", 6, 10)])
    # The second chunk violates NOT NULL inside the transaction: nothing of the new version may show.
    bad = [Chunk("gamma", "gamma", "", 11, 16), Chunk("x", None, "", 0, 1)]  # type: ignore[arg-type]
    with pytest.raises(sqlite3.IntegrityError):
        _save(store, doc, bad)
    snap = store.snapshot("m")
    assert [c.content for c in snap.chunks] == ["alpha", "beta"]
    assert store.document(doc).chunk_count == 2  # type: ignore[union-attr]
    # A second connection (another process) sees the same.
    assert open_store(tmp_path / "ix").snapshot("m").vectors.shape == (2, 8)


def test_snapshot_never_mixes_embedding_models(tmp_path: Path) -> None:
    store = open_store(tmp_path / "ix", create=True)
    _save(store, store.add_pending("/a", "a", "s"), [Chunk("alpha", "alpha", "", 0, 5)], model="m1")
    _save(store, store.add_pending("/b", "b", "s"), [Chunk("beta", "beta", "", 6, 10)], model="m2")
    snap = store.snapshot("m1")
    assert [c.content for c in snap.chunks] == ["alpha"] and snap.excluded_documents == 1


def test_failed_documents_keep_their_reason_and_lose_their_chunks(tmp_path: Path) -> None:
    store = open_store(tmp_path / "ix", create=True)
    doc = store.add_pending("/a", "a", "s")
    _save(store, doc, [Chunk("alpha", "alpha", "", 0, 5)])
    store.save_failed(doc, sha256="s2", stamps={}, error="binary data, not text")
    d = store.document(doc)
    assert d is not None and d.status == "failed" and d.error == "binary data, not text" and d.chunk_count == 0
    assert store.snapshot("m").chunks == []


def test_unreadable_index_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CiteragError, match="no index at"):
        open_store(tmp_path / "missing")
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(CiteragError, match="not a directory"):
        open_store(tmp_path / "file", create=True)
    (tmp_path / "corrupt").mkdir()
    (tmp_path / "corrupt" / "index.sqlite3").write_bytes(b"this is not a database" * 100)
    with pytest.raises(CiteragError, match="cannot open index"):
        open_store(tmp_path / "corrupt")
