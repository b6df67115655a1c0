"""A search's filters: what a caller may write, how each is read, and which documents each matches."""

from __future__ import annotations

from typing import Any

import pytest

from citerag.search.filters import FilterError, Filters, checked_tags, path_of, source_of
from citerag.types import Facets


def doc(source_path: str, extractor: str = "markdown", language: str = "en",
        updated_at: str = "2026-11-30T12:00:00+00:00", tags: tuple[str, ...] = ()) -> Facets:
    return Facets(1, source_path, 3, extractor, language, updated_at, tags)


UPLOAD = doc("upload:guide.pdf", "pdf", tags=("sre", "on-call"))
SYNCED = doc("source:handbook:docs/admin/backup.md", language="de", tags=("sre",))
CRAWLED = doc("source:site:https://example.org/docs/intro.html", "html")
LOCAL = doc("/home/me/notes/todo.txt", "text", updated_at="2026-12-01T00:00:00+00:00")
ALL = [UPLOAD, SYNCED, CRAWLED, LOCAL]


def matching(data: dict[str, Any]) -> list[Facets]:
    f = Filters.parse(data)
    return [d for d in ALL if f.matches(d)]


def test_each_document_knows_its_source_and_its_path_in_it() -> None:
    assert [source_of(d.source_path) for d in ALL] == ["upload", "handbook", "site", "local"]
    assert [path_of(d.source_path) for d in ALL] == ["guide.pdf", "docs/admin/backup.md", "https://example.org/docs/intro.html",
                                         "/home/me/notes/todo.txt"]


@pytest.mark.parametrize(("data", "expected"), [
    ({}, ALL),
    ({"source": "handbook"}, [SYNCED]),
    ({"source": ["upload", "local"]}, [UPLOAD, LOCAL]),
    ({"type": "pdf"}, [UPLOAD]),
    ({"type": ["html", "markdown"]}, [SYNCED, CRAWLED]),
    ({"language": "de"}, [SYNCED]),
    ({"path": "docs/**"}, [SYNCED]),
    ({"path": "**/*.md"}, [SYNCED]),
    ({"path": ["*.pdf", "https://example.org/docs/*"]}, [UPLOAD, CRAWLED]),
    ({"path": "/home/**/todo.txt"}, [LOCAL]),
    ({"since": "2026-12-01"}, [LOCAL]),  # the day's first moment
    ({"until": "2026-11-30"}, [UPLOAD, SYNCED, CRAWLED]),  # the whole day
    ({"until": "2026-11-30T11:59:59Z"}, []),
    ({"since": "2026-11-30T12:00:00+00:00", "until": "2026-11-30T13:00:00+01:00"}, [UPLOAD, SYNCED, CRAWLED]),
    ({"type": "markdown", "language": "en"}, []),  # every field must match
    ({"tags": "sre"}, [UPLOAD, SYNCED]),
    ({"tags": ["on-call", "hr"]}, [UPLOAD]),
    ({"tags": "sre", "type": "markdown"}, [SYNCED]),
])
def test_a_document_matches_every_field_set_and_any_value_of_one(data: dict[str, Any],
                                                                   expected: list[Facets]) -> None:
    assert matching(data) == expected


@pytest.mark.parametrize(("data", "field"), [
    ({"colour": "red"}, "filters.colour"),
    ({"type": "exe"}, "filters.type"),
    ({"type": ["pdf", 3]}, "filters.type"),
    ({"source": "a b"}, "filters.source"),
    ({"source": ""}, "filters.source"),
    ({"language": "English"}, "filters.language"),
    ({"path": "/"}, "filters.path"),
    ({"since": "yesterday"}, "filters.since"),
    ({"until": 20261201}, "filters.until"),
    ({"since": "2026-12-02", "until": "2026-12-01"}, "filters.until"),
    ({"source": ["x"] * 101}, "filters.source"),
    ({"tags": "two words"}, "filters.tags"),
])
def test_a_wrong_filter_is_an_error_naming_it(data: dict[str, Any], field: str) -> None:
    with pytest.raises(FilterError) as caught:
        Filters.parse(data)
    assert caught.value.field == field and str(caught.value).startswith(field + ": ")


def test_tags_are_checked_and_kept_once_in_their_order() -> None:
    assert checked_tags(["sre", "team:db", "sre", "v1.2/x"]) == ["sre", "team:db", "v1.2/x"]
    for wrong in (["a b"], [""], ["-x"], ["x" * 65], [f"t{i}" for i in range(33)]):
        with pytest.raises(FilterError) as caught:
            checked_tags(wrong)
        assert caught.value.field == "tags"


def test_filters_compare_and_key_by_what_they_select() -> None:
    assert not Filters() and not Filters.parse({}) and not Filters.parse(None)
    one = Filters.parse({"type": "pdf", "since": "2026-01-01"})
    assert one and one == Filters.parse({"type": ["pdf"], "since": "2026-01-01"})
    assert one.as_json() == {"type": ["pdf"], "since": "2026-01-01"}
    assert hash(one) == hash(Filters(type=("pdf",), since="2026-01-01"))
