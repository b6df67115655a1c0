"""What a caller knows about the documents it wants searched: their source, format, path, language and date.

Filters are resolved against the store view a search reads (the indexed documents' rows), into the documents they
allow (citerag.index.base.Allowed); every index then ranks only those documents' chunks, so a filtered top-k is
the best k that match, never fewer because hits of other documents were dropped afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime, timedelta
from functools import cached_property
from typing import Any

from citerag.errors import CiteragError
from citerag.globs import glob_regex
from citerag.index.base import Allowed
from citerag.store.base import StoreView
from citerag.types import SOURCE_SCHEME, TAG, UPLOAD_SCHEME, Facets, readable_by

# A document's `source` is the name of the source that syncs it, or one of these.
UPLOADED = "upload"  # sent through the API or the page
LOCAL = "local"  # a path given to `citerag ingest`
# The formats citerag reads, by the extractor's name (the document's "extractor" stamp).
TYPES = ("csv", "docx", "epub", "html", "markdown", "ods", "odt", "pdf", "text", "transcript", "xlsx")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
_LANGUAGE = re.compile(r"[a-z]{2,3}\Z")
MAX_VALUES = 100
MAX_TAGS = 32  # on one document


class FilterError(CiteragError):
    """A filter a caller wrote wrongly; `field` names it as the request spells it (filters.type, ...)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Filters:
    """Each field left empty allows everything; a document must match every field that is set, and any one value of
    a field (source ["handbook", "upload"] is either). `since`/`until` bound when the document's current version
    was indexed (inclusive; a date alone means the whole day, in UTC)."""

    source: tuple[str, ...] = ()
    type: tuple[str, ...] = ()
    path: tuple[str, ...] = ()  # globs over the document's path in its origin (`docs/**/*.md`, `**/README.md`)
    language: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()  # any one of the document's tags
    since: str | None = None
    until: str | None = None
    # Not a caller's choice: the groups of the principal asking (Principal.audience), set by the server. A document
    # with groups is searched only when one of them is here; None: every document (an admin of the collection).
    audience: frozenset[str] | None = None

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self) if f.name != "audience") or self.audience is not None

    def seen_by(self, audience: frozenset[str] | None) -> Filters:
        """These filters for a caller who may read `audience`'s documents."""
        return replace(self, audience=audience)

    @classmethod
    def parse(cls, data: Mapping[str, Any] | None, prefix: str = "filters") -> Filters:
        """Filters from a request's JSON object (a value may be one string or a list of them); a FilterError
        names the first field that is wrong."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise FilterError(prefix, "must be an object")
        known = {f.name for f in fields(cls)} - {"audience"}
        for key in data:
            if key not in known:
                raise FilterError(f"{prefix}.{key}", f"unknown filter; known: {', '.join(sorted(known))}")
        values = {key: _strings(data.get(key), f"{prefix}.{key}")
                  for key in ("source", "type", "path", "language", "tags")}
        for value in values["source"]:
            if not _NAME.match(value):
                raise FilterError(f"{prefix}.source", f"{value!r} is not a source name")
        for value in values["type"]:
            if value not in TYPES:
                raise FilterError(f"{prefix}.type", f"{value!r} is not a type; known: {', '.join(TYPES)}")
        for value in values["language"]:
            if not _LANGUAGE.match(value):
                raise FilterError(f"{prefix}.language", f"{value!r} is not a language code such as en or de")
        for value in values["tags"]:
            if not TAG.match(value):
                raise FilterError(f"{prefix}.tags", f"{value!r} is not a tag")
        for value in values["path"]:
            if not value.strip("/") or len(value) > 1000:
                raise FilterError(f"{prefix}.path", f"{value!r} is not a path pattern")
        dates = {key: _instant(data.get(key), f"{prefix}.{key}", end=key == "until") for key in ("since", "until")}
        if dates["since"] and dates["until"] and dates["since"][1] > dates["until"][1]:
            raise FilterError(f"{prefix}.until", "is before since")
        since, until = dates["since"], dates["until"]
        return cls(tuple(values["source"]), tuple(values["type"]), tuple(values["path"]), tuple(values["language"]),
                   tuple(values["tags"]), None if since is None else since[0], None if until is None else until[0])

    def as_json(self) -> dict[str, Any]:
        """The fields a caller set (what a trace keeps and a replay passes again); the audience is not one."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
                for f in fields(self) if getattr(self, f.name) and f.name != "audience"}

    def key(self) -> dict[str, Any]:
        """What a cached result depends on: the caller's filters and whose documents it may read."""
        return self.as_json() | ({} if self.audience is None else {"audience": sorted(self.audience)})

    def matches(self, document: Facets) -> bool:
        if not readable_by(document.groups, self.audience):
            return False
        if self.source and source_of(document.source_path) not in self.source:
            return False
        if self.type and document.extractor not in self.type:
            return False
        if self.language and document.language not in self.language:
            return False
        if self.tags and not set(self.tags) & set(document.tags):
            return False
        # A pattern is read without its leading '/', so the path is too (an ingested file's is absolute).
        if self.path and not any(glob_regex(p).match(path_of(document.source_path).lstrip("/")) for p in self.path):
            return False
        low, high = self._bounds
        if low is not None or high is not None:
            at = _parsed(document.updated_at)
            if at is None or (low is not None and at < low) or (high is not None and at > high):
                return False
        return True

    @cached_property
    def _bounds(self) -> tuple[datetime | None, datetime | None]:
        low, high = _instant(self.since, "since"), _instant(self.until, "until", end=True)
        return None if low is None else low[1], None if high is None else high[1]

    def resolve(self, view: StoreView) -> Allowed | None:
        """The view's indexed documents that match, and the chunks they hold; None when every one does (the
        indexes' unfiltered path ranks the same, faster)."""
        facets = view.facets()
        chosen = [d for d in facets if self.matches(d)]
        if len(chosen) == len(facets):
            return None
        # A caller who may not read every document: the lexical statistics are those of the ones it may read.
        visible = None if self.audience is None else [d.id for d in facets if readable_by(d.groups, self.audience)]
        return Allowed.of((d.id for d in chosen), sum(d.chunk_count for d in chosen),
                          visible if visible is not None and len(visible) < len(facets) else None)


def checked_tags(tags: Iterable[str], field: str = "tags") -> list[str]:
    """A document's tags as given, checked (a FilterError names `field`), without repeats, in their order."""
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str) or not TAG.match(tag):
            raise FilterError(field, f"{tag!r} is not a tag: letters, digits and . _ : / -, at most 64")
        if tag not in out:
            out.append(tag)
    if len(out) > MAX_TAGS:
        raise FilterError(field, f"at most {MAX_TAGS} tags")
    return out


def source_of(path: str) -> str:
    """The source of the document stored under this path: a source's name, UPLOADED or LOCAL."""
    if path.startswith(SOURCE_SCHEME):
        return path[len(SOURCE_SCHEME):].partition(":")[0]
    return UPLOADED if path.startswith(UPLOAD_SCHEME) else LOCAL


def path_of(path: str) -> str:
    """The path in its origin of the document stored under this path: an upload's name, a source's key (its
    relative path, repository path or URL), a local file's path."""
    if path.startswith(SOURCE_SCHEME):
        return path[len(SOURCE_SCHEME):].partition(":")[2]
    return path[len(UPLOAD_SCHEME):] if path.startswith(UPLOAD_SCHEME) else path


def _strings(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    items: Iterable[Any] = [value] if isinstance(value, str) else value if isinstance(value, list) else [None]
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise FilterError(field, "must be a non-empty string or a list of them")
        out.append(item.strip())
    if len(out) > MAX_VALUES:
        raise FilterError(field, f"at most {MAX_VALUES} values")
    return out


def _instant(value: Any, field: str, end: bool = False) -> tuple[str, datetime] | None:
    """(the value as given, the instant it bounds): a date alone is its first moment, or its last for `until`."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FilterError(field, "must be an ISO 8601 date or date and time")
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            return value, start + timedelta(days=1) - timedelta(microseconds=1) if end else start
        return value, _aware(datetime.fromisoformat(value))
    except ValueError:
        raise FilterError(field, f"{value!r} is not an ISO 8601 date or date and time") from None


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _parsed(text: str) -> datetime | None:
    try:
        return _aware(datetime.fromisoformat(text))
    except ValueError:
        return None
