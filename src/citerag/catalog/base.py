"""The catalog contract: a server's collections by name, each with its settings."""

from __future__ import annotations

import re
from typing import Any, Protocol

from citerag.errors import CiteragError
from citerag.settings import CLIENT_SETTINGS, COLLECTION_NAME, Settings

_NAME = re.compile(COLLECTION_NAME)

# CLIENT_SETTINGS: what an API client may set on a collection it creates, retrieval and the refusal rule. Not the
# generator's endpoint or model path: those are the operator's (a client could otherwise point the server at any host).


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


def is_collection_name(name: object) -> bool:
    # fullmatch: `$` alone would let a trailing newline through.
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def check_collection_name(name: object) -> str:
    """`name` if it is a collection name, else one line saying what a name may be (CiteragError)."""
    if not is_collection_name(name):
        shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
        raise CiteragError(f"bad collection name {shown}: 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                           "letter or digit and not ending with '.'")
    assert isinstance(name, str)
    return name


def check_changes(home: Settings, name: str, changes: dict[str, Any]) -> None:
    """A collection's name and a client's settings for it, refused (one line) unless allowed and valid as a whole."""
    check_collection_name(name)
    unknown = sorted(set(changes) - set(CLIENT_SETTINGS))
    if unknown:
        raise CiteragError(f"settings {', '.join(unknown)} cannot be set on a collection "
                           f"(allowed: {', '.join(CLIENT_SETTINGS)})")
    # Validated as a whole (name pattern, overlap < target) before anything is written.
    Settings.model_validate({"index_dir": home.index_dir, "collection": name, **changes})
