"""Extraction: one module per format; `extractor_for` picks by file suffix.

Every extractor turns bytes into `Extracted`: canonical text, title, sections, its name and version,
warnings, and (for formats with pages, cues or cells) a locator map from canonical offsets to them.
"""

from __future__ import annotations

from pathlib import Path

from citerag.extract.base import Extractor
from citerag.extract.csvfile import CsvExtractor
from citerag.extract.docx import DocxExtractor
from citerag.extract.epub import EpubExtractor
from citerag.extract.html import HtmlExtractor
from citerag.extract.markdown import MarkdownExtractor, TextExtractor
from citerag.extract.ods import OdsExtractor
from citerag.extract.odt import OdtExtractor
from citerag.extract.pdf import PdfExtractor
from citerag.extract.transcript import TranscriptExtractor
from citerag.extract.xlsx import XlsxExtractor

_EXTRACTORS: list[Extractor] = [MarkdownExtractor(), TextExtractor(), HtmlExtractor(), PdfExtractor(),
                                DocxExtractor(), OdtExtractor(), EpubExtractor(), XlsxExtractor(),
                                OdsExtractor(), CsvExtractor(), TranscriptExtractor()]
EXTRACTORS = tuple(_EXTRACTORS)


def extractor_for(path: Path) -> Extractor | None:
    suffix = path.suffix.lower()
    return next((e for e in EXTRACTORS if suffix in e.suffixes), None)


def supported_suffixes() -> list[str]:
    return sorted(s for e in EXTRACTORS for s in e.suffixes)


__all__ = ["Extractor", "extractor_for", "supported_suffixes"]
