"""The originals' contract, shared by the backends (folder.py, postgres.py) and the package's functions: the
backends import this module, never the package."""

from __future__ import annotations

from typing import Protocol


class Originals(Protocol):
    """One collection's uploaded originals, by SHA-256."""

    def save(self, sha256: str, data: bytes) -> None:
        """Keep `data` under its hash; complete or absent, never half written; saving it again is harmless."""

    def read(self, sha256: str) -> bytes | None:
        """The bytes under `sha256`, or None when they are not there."""

    def remove_unreferenced(self, sha256: str) -> None:
        """Remove the bytes unless a document of the collection still has this hash."""
