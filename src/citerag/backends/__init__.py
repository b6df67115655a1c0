"""Backends: the bundle of a home's or a collection's parts (store, search indexes, catalog, API keys, uploaded
originals, traces) that one kind of store implies, embedded (sqlite.py) or shared (postgres.py); base.py says
what a bundle provides.

`open_backend` is the one place where a store URL's scheme picks a backend: nothing else asks which one it is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from citerag.errors import CiteragError

if TYPE_CHECKING:
    from citerag.backends.base import Backend
    from citerag.settings import Settings


def open_backend(settings: Settings) -> Backend:
    """The backend of the settings' store URL: `sqlite:///DIR` (one collection per directory) or
    `postgresql://...` (many collections in one database)."""
    return backend_for_url(settings.store_url)


def backend_for_url(url: str) -> Backend:
    """The backend a store URL names (what `open_backend` answers for settings holding it)."""
    scheme = url.partition("://")[0]
    if scheme.lower() == "sqlite":
        from citerag.backends.sqlite import EMBEDDED

        return EMBEDDED
    if scheme.lower() in ("postgresql", "postgres"):
        from citerag.backends.postgres import POSTGRES

        return POSTGRES
    raise CiteragError(f"no store backend for {scheme}:// (sqlite:///DIR and postgresql://... are available)")


__all__ = ["backend_for_url", "open_backend"]
