"""What every kind of source offers the sync (citerag.app.sources): one pass over the origin that says, for each
document it holds, whether it is unchanged since the token the collection last recorded, or its new bytes.

The sync owns the rest (the store, the index, removals, the lease, the status): a source never touches a
collection. A pass that could not see the whole origin (a page limit, a listing that failed half way) says so
with `complete = False`, and then nothing is removed: a document that was not seen is not a document that is gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from citerag.errors import CiteragError

USER_AGENT = "citerag-sync/1 (+https://github.com/citerag/citerag; a RAG index of this site)"


class Unreachable(CiteragError):
    """The origin cannot be read at all (server down, repository gone, folder missing): nothing is removed, the
    sync backs off and reports this as the source's last error."""


@dataclass(frozen=True)
class Known:
    """What the collection recorded for one document of the source at its last sync."""

    token: str  # the version token the source gave (equal tokens: unchanged, nothing fetched)
    read: Callable[[], bytes | None]  # the stored copy's bytes (a web page answered 304 still has links to follow)


@dataclass(frozen=True)
class Unchanged:
    """The document is as recorded; `token` may be newer (a folder file touched with the same bytes)."""

    key: str
    token: str


@dataclass(frozen=True)
class Fetched:
    """New or changed bytes of one document."""

    key: str  # the source's own identifier: a relative path, a repository path, a canonical URL
    token: str
    name: str  # a file name whose suffix picks the extractor
    data: bytes
    link: str = ""  # where a citation opens the live original (a URL; '' where the source has none)
    origin: str = ""  # the identifier people read: "docs/a.md at 3f2c1e0", a URL, a path


@dataclass(frozen=True)
class Failed:
    """One document could not be read this time (its recorded version, if any, stays)."""

    key: str
    error: str


Change = Unchanged | Fetched | Failed


class Upstream(Protocol):
    """One configured origin. `scan` yields a Change for every document the origin holds now; after the iterator
    is exhausted, `complete` says whether that was all of them (only then are the others removed)."""

    complete: bool

    def scan(self, known: Mapping[str, Known]) -> Iterator[Change]:
        """Raises Unreachable when the origin cannot be read at all."""
        ...
