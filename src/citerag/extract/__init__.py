"""Extraction: one module per format; `extractor_for` picks by file suffix."""

from __future__ import annotations

from pathlib import Path

from citerag.extract.base import Extractor
from citerag.extract.html import HtmlExtractor
from citerag.extract.markdown import MarkdownExtractor, TextExtractor

_EXTRACTORS: list[Extractor] = [MarkdownExtractor(), TextExtractor(), HtmlExtractor()]
EXTRACTORS = tuple(_EXTRACTORS)


def extractor_for(path: Path) -> Extractor | None:
    suffix = path.suffix.lower()
    return next((e for e in EXTRACTORS if suffix in e.suffixes), None)


def supported_suffixes() -> list[str]:
    return sorted(s for e in EXTRACTORS for s in e.suffixes)


__all__ = ["Extractor", "extractor_for", "supported_suffixes"]
