"""Stores: a Store protocol, one module per backend; `open_store` picks one."""

from __future__ import annotations

from pathlib import Path

from citerag.errors import CiteragError
from citerag.store.base import ChunkStats, Snapshot, Store


def open_store(index_dir: Path, create: bool = False, *, busy_timeout: float | None = None) -> Store:
    """Open the index in `index_dir`, upgrading an older schema in place; `create` makes a new one if none is there.

    `busy_timeout` (seconds) is how long a write waits for another writer before StoreUnavailable.
    """
    from citerag.store.sqlite import BUSY_TIMEOUT_S, SqliteStore

    return SqliteStore(index_dir, create=create, busy_timeout=BUSY_TIMEOUT_S if busy_timeout is None else busy_timeout)


def open_store_url(url: str, create: bool = False, *, collection: str = "default", read_url: str = "",
                   lexical: str = "reference") -> Store:
    """The factory: the backend a store URL names. `sqlite:///DIR` is one collection per directory;
    `postgresql://...` holds many collections in one database (this store is `collection`'s), and reads
    searches from `read_url` (a streaming replica) when one is given. `lexical` is the tokenisation a PostgreSQL
    store writes its BM25 postings with (an embedded store's index files are beside it, not in it)."""
    scheme, _, rest = url.partition("://")
    if scheme.lower() == "sqlite":
        return open_store(Path(rest), create=create)
    if scheme.lower() in ("postgresql", "postgres"):
        from citerag.store.postgres import PostgresStore

        return PostgresStore(url, collection, create=create, read_url=read_url, lexical=lexical)
    raise CiteragError(f"no store backend for {scheme}:// (sqlite:///DIR and postgresql://... are available)")


__all__ = ["ChunkStats", "Snapshot", "Store", "open_store", "open_store_url"]
