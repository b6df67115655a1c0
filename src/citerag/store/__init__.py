"""Stores: a Store protocol (base.py), one module per backend (sqlite*.py, postgres*.py); citerag.backends picks
one for a store URL."""

from __future__ import annotations

from citerag.store.base import ChunkStats, Snapshot, Store

__all__ = ["ChunkStats", "Snapshot", "Store"]
