"""Where a server's collections live, by the home's store: folders beside an embedded store, rows of a
PostgreSQL database. citerag.backends picks one."""

from __future__ import annotations

from citerag.catalog.base import Catalog

__all__ = ["Catalog"]
