"""Where a server's collections live, by the home's store: folders beside an embedded store, rows of a
PostgreSQL database. `open_catalog` picks one."""

from __future__ import annotations

from citerag.catalog.base import CLIENT_SETTINGS, Catalog
from citerag.settings import Settings


def open_catalog(home: Settings) -> Catalog:
    if home.store_scheme == "postgresql":
        from citerag.catalog.postgres import PostgresCatalog

        return PostgresCatalog(home)
    from citerag.catalog.folder import FolderCatalog

    return FolderCatalog(home)


__all__ = ["CLIENT_SETTINGS", "Catalog", "open_catalog"]
