"""What an ingestion takes and gives: a source's bytes, a document's outcome, a run's report, and the files found
under the paths a person named (checked before anything is opened). Data and discovery only: the indexer that
turns them into documents is citerag.ingest.indexer."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from citerag.errors import CiteragError

log = logging.getLogger("citerag.ingest")


@dataclass(frozen=True)
class Source:
    """One document to index: its bytes and the key it is stored under (a file path, or any URI an upload
    or a worker gives). `name` (default: the key's last component) picks the extractor by its suffix."""

    uri: str
    data: bytes
    name: str = ""
    # The SHA-256 of the version these bytes rebuild: saved only while the document still has it (Store.save_indexed)
    replaces: str | None = None

    @property
    def display_name(self) -> str:
        return self.name or PurePosixPath(self.uri.replace("\\", "/")).name or self.uri


@dataclass(frozen=True)
class Outcome:
    document_id: int
    status: str  # indexed | failed | unchanged
    error: str | None = None


@dataclass
class IngestReport:
    indexed: list[str] = field(default_factory=list)
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    chunks: int = 0
    over_window: int = 0
    embedded_tokens: int = 0
    header_tokens: int = 0

    def as_json(self) -> dict[str, Any]:
        return {"indexed": self.indexed, "unchanged": self.unchanged,
                "failed": [{"source_path": p, "error": e} for p, e in self.failed],
                "removed": self.removed, "chunks": self.chunks, "chunks_over_window": self.over_window,
                "embedded_tokens": self.embedded_tokens, "header_tokens": self.header_tokens}


@dataclass(frozen=True)
class Discovered:
    """Files to index and the folders they were found under (documents gone from those folders are removed)."""

    files: list[Path]
    roots: list[Path]


def discover(paths: Iterable[Path]) -> Discovered:
    """Files named explicitly are taken whatever their suffix; folders give their supported files.
    Checked before anything is opened, so a wrong path leaves no index behind."""
    # Here, not at the top: the extractors import lxml, pdf and office readers, which `citerag ask` never needs.
    from citerag.extract import supported_suffixes

    files: list[Path] = []
    roots: list[Path] = []
    suffixes = set(supported_suffixes())
    for given in paths:
        if not given.exists():
            raise CiteragError(f"no such file or directory: {display_path(given)}")
        path = given.resolve()
        if path.is_dir():
            roots.append(path)
            found = _inside(path, [p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix.lower() in suffixes
                                   and not any(part.startswith(".") for part in p.relative_to(path).parts)])
            if not found:
                raise CiteragError(f"no documents under {display_path(given)} "
                                   f"(supported: {' '.join(sorted(suffixes))})")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise CiteragError(f"not a regular file or directory: {display_path(given)}")
    return Discovered(list(dict.fromkeys(files)), roots)


def _inside(root: Path, paths: list[Path]) -> list[Path]:
    """The files a folder really holds: a symbolic link is followed only to a file under the same folder (and
    then taken as that file, so it is not indexed twice); one leading out of it is skipped and said, so that
    indexing a folder never reads what its owner did not put in it. (Linked folders are not entered at all.)"""
    kept = []
    for p in paths:
        target = p.resolve()
        if target.is_relative_to(root):
            kept.append(target)
        else:
            log.warning("skipped %s: a symbolic link out of %s (name the file itself to index it)",
                        display_path(p), display_path(root))
    return kept


def display_path(path: Path) -> str:
    """The path as text that can be stored and printed: bytes that are not UTF-8 are shown as \\xNN."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")
