"""Stores: a Store protocol, one module per backend; `open_store` picks one."""

from __future__ import annotations

from pathlib import Path

from citerag.store.base import ChunkStats, Snapshot, Store


def open_store(index_dir: Path, create: bool = False) -> Store:
    from citerag.store.sqlite import SqliteStore

    return SqliteStore(index_dir, create=create)


__all__ = ["ChunkStats", "Snapshot", "Store", "open_store"]
