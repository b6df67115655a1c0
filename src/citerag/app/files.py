"""One file as the indexer sees it, without a collection: what `citerag extract` and `citerag chunk` show."""

from __future__ import annotations

from pathlib import Path

from citerag.errors import CiteragError
from citerag.ingest.files import display_path
from citerag.settings import DEFAULT_ENCODER
from citerag.types import Chunk, Extracted


def extract_file(path: Path, title: str | None = None) -> Extracted:
    """A file's canonical text, sections and locators, as the indexer would see them."""
    from citerag.extract import extractor_for

    extractor = extractor_for(path)
    if extractor is None:
        raise CiteragError(f"unsupported format: {display_path(path)}")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CiteragError(f"cannot read {display_path(path)}: {exc.strerror}") from exc
    return extractor.extract(data, path, title=title)


def chunk_file(path: Path, strategy: str, target: int, overlap: int, title: str | None = None,
               embedding_model: str = DEFAULT_ENCODER, percentile: float = 95.0) -> list[Chunk]:
    """How one file is cut under a strategy: what `citerag chunk` shows. `embedding_model` is loaded only for
    a strategy that embeds sentences to cut (G)."""
    from citerag.chunk import chunk_extracted
    from citerag.embed import load_encoder

    return chunk_extracted(extract_file(path, title=title or path.stem), strategy, target, overlap,
                           embed=lambda texts: load_encoder(embedding_model).encode(texts), percentile=percentile)
