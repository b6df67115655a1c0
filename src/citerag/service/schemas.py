"""Request bodies, validated by FastAPI: a bad field is a 422 that names it (see errors.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter

from citerag.app.home import COLLECTION_NAME  # the application core's rule, one for the CLI and the API


class _Body(BaseModel):
    # A misspelt option is an error, not silently ignored; and types are strict, so that `true` is not k=1, "yes"
    # is not a boolean and "5" is not a number (a JSON integer is still accepted where a float is asked for).
    model_config = ConfigDict(extra="forbid", strict=True)


class CollectionSettings(_Body):
    threshold: float | None = Field(default=None, gt=0, le=2)
    refusal: Literal["calibrated", "threshold"] | None = None
    max_sources: int | None = Field(default=None, ge=1, le=20)
    mode: Literal["dense", "bm25", "hybrid", "adaptive"] | None = None
    k: int | None = Field(default=None, ge=1, le=1000)
    rrf_k: int | None = Field(default=None, ge=1, le=10000)
    strategy: Literal["A", "B", "C", "D", "E", "F", "G"] | None = None
    target: int | None = Field(default=None, ge=16, le=100000)
    overlap: int | None = Field(default=None, ge=0, le=100000)
    semantic_percentile: float | None = Field(default=None, gt=0, le=100)
    vector_index: Literal["exact", "hnsw"] | None = None


class CreateCollection(_Body):
    name: str = Field(pattern=COLLECTION_NAME)
    settings: CollectionSettings = Field(default_factory=CollectionSettings)


def _values(value: Any, description: str) -> Any:
    """One value or a list of them (any matches). The values are checked by citerag's filters (one rule for the API,
    the CLI and MCP); `value` only describes them to the schema's readers (and its fuzzer)."""
    return Field(default=None, description=description,
                 json_schema_extra=lambda schema: _each(schema, value))


def _each(schema: dict[str, Any], value: Any) -> None:
    item = TypeAdapter(value).json_schema()
    schema["anyOf"] = [item, {"type": "array", "items": item, "maxItems": 100}, {"type": "null"}]


_Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
_Type = Literal["csv", "docx", "epub", "html", "markdown", "ods", "odt", "pdf", "text", "transcript", "xlsx"]
_Glob = Annotated[str, StringConstraints(min_length=1, max_length=1000, pattern=r"[^/]")]
_Language = Annotated[str, StringConstraints(pattern=r"^[a-z]{2,3}$")]
_Tag = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$")]
_ISO = r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?$"  # a date, or date and time
_Instant = Annotated[str, StringConstraints(pattern=_ISO)]
_Many = str | list[str] | None


class SearchFilters(_Body):
    """Which documents may be searched: every field set must match, any one of a field's values; applied inside
    each index, so k results are the best k that match."""

    source: _Many = _values(_Name, 'A source\'s name, "upload" (sent to the API) or "local" (`citerag ingest`).')
    type: _Many = _values(_Type, "The format the document was read as.")
    path: _Many = _values(_Glob, "A glob over the document's path in its origin: docs/**/*.md, **/README.md, a URL.")
    language: _Many = _values(_Language, "The document's language code (en, de).")
    tags: _Many = _values(_Tag, "One of the document's tags.")
    since: _Instant | None = Field(default=None, description="Indexed at or after this ISO 8601 date or time.")
    until: _Instant | None = Field(default=None, description="Indexed at or before this ISO 8601 date (the whole "
                                                             "day) or time.")


class SearchRequest(_Body):
    query: str = Field(min_length=1, max_length=4000)
    mode: Literal["dense", "bm25", "hybrid", "adaptive"] | None = None
    k: int | None = Field(default=None, ge=1, le=100)
    filters: SearchFilters | None = None


class AskRequest(_Body):
    question: str = Field(min_length=1, max_length=4000)
    mode: Literal["dense", "bm25", "hybrid", "adaptive"] | None = None
    k: int | None = Field(default=None, ge=1, le=100)
    threshold: float | None = Field(default=None, gt=0, le=2)
    max_sources: int | None = Field(default=None, ge=1, le=20)
    filters: SearchFilters | None = None
    stream: bool = Field(default=False, description="Answer as server-sent events: retrieval, citation, delta, "
                                                    "final or refusal, error, done.")


class TagsRequest(_Body):
    tags: list[str] = Field(max_length=32, description="The document's tags, replacing its own: letters, digits and "
                                                        ". _ : / -, at most 64 each.")


class GroupsRequest(_Body):
    groups: list[str] = Field(max_length=64, description="The groups that may read the document, replacing its own "
                                                          "([]: everyone who may read the collection).")


class SessionRequest(_Body):
    key: str = Field(min_length=1, max_length=200)


class FeedbackRequest(_Body):
    helpful: bool
    source: int | None = Field(default=None, ge=1, le=100, description="The [n] of the cited source that was right.")
    none_right: bool = Field(default=False, description="None of the cited sources was right.")
    comment: str = Field(default="", max_length=2000)


class LabelRequest(_Body):
    trace_id: str = Field(pattern=r"^[0-9a-fA-F]{32}$", description="The answer's trace id.")
    document_id: int | None = Field(default=None, ge=1)
    start: int | None = Field(default=None, ge=0, description="The needle's first code point in the document's text.")
    end: int | None = Field(default=None, ge=1, description="One past the needle's last code point.")
    ood: bool = Field(default=False, description="The question is out of the collection's domain.")


class SourceRequest(_Body):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    kind: Literal["folder", "git", "web"]
    location: str = Field(min_length=1, max_length=4000, description="The folder's absolute path, or the URL.")
    branch: str | None = Field(default=None, min_length=1, max_length=200)
    globs: list[str] | None = Field(default=None, max_length=50)
    link: str | None = Field(default=None, max_length=1000, description="Git: a link template ({commit}, {path}).")
    sitemap: str | None = Field(default=None, max_length=4000)
    prefix: str | None = Field(default=None, max_length=4000)
    rate: float | None = Field(default=None, gt=0, le=100)
    max_pages: int | None = Field(default=None, ge=1, le=1_000_000)
    watch: bool | None = None
    tags: list[Annotated[list[str], Field(min_length=2, max_length=2)]] | None = Field(
        default=None, max_length=100,
        description="Rules [GLOB, TAG]: a document whose path or URL matches GLOB carries TAG (a search filter).")
    groups: list[Annotated[list[str], Field(min_length=2, max_length=2)]] | None = Field(
        default=None, max_length=100,
        description="Rules [GLOB, GROUP]: only GROUP reads a document whose path or URL matches GLOB (several "
                    "matching: any of them; none: everyone who reads the collection).")
    interval_s: float | None = Field(default=None, ge=1, le=366 * 86400)
    cron: str | None = Field(default=None, max_length=200)
