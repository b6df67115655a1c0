"""The extractor contract: bytes in, canonical text with sections out."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from citerag.types import Extracted


class Extractor(Protocol):
    name: str
    version: str
    suffixes: tuple[str, ...]

    def extract(self, data: bytes, path: Path, title: str | None = None) -> Extracted:
        """Raise ExtractionError with a one-line reason when the file cannot be read as this format."""
        ...
