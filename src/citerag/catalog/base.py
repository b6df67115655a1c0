"""The catalog contract: a server's collections by name, each with its settings."""

from __future__ import annotations

from typing import Any, Protocol

from citerag.errors import CiteragError
from citerag.settings import CLIENT_SETTINGS, Settings

# What an API client may set on a collection it creates: retrieval and the refusal rule. Not the generator's
# endpoint or model path: those are the operator's (a client could otherwise point the server at any host).


class Catalog(Protocol):
    home: Settings

    def names(self) -> list[str]:
        """The home collection first, then the others by name."""
        ...

    def exists(self, name: str) -> bool: ...

    def settings(self, name: str) -> Settings: ...

    def create(self, name: str, changes: dict[str, Any]) -> Settings:
        """A new collection with these client settings (CLIENT_SETTINGS only); its settings."""
        ...

    def delete(self, name: str) -> None:
        """Remove a collection and everything in it; the home collection cannot be deleted."""
        ...

    def close(self) -> None:
        """Release what the catalog holds open (connections)."""
        ...

    def identity(self, name: str) -> object | None:
        """What tells this collection from one deleted and created again under its name (None: no such
        collection), so that a long-lived process notices another process did that."""
        ...


def check_changes(home: Settings, name: str, changes: dict[str, Any]) -> None:
    """A client's settings for a new collection, refused (one line) unless allowed and valid as a whole."""
    unknown = sorted(set(changes) - set(CLIENT_SETTINGS))
    if unknown:
        raise CiteragError(f"settings {', '.join(unknown)} cannot be set on a collection "
                           f"(allowed: {', '.join(CLIENT_SETTINGS)})")
    # Validated as a whole (name pattern, overlap < target) before anything is written.
    Settings.model_validate({"index_dir": home.index_dir, "collection": name, **changes})
