"""The originals' two backends behind one Protocol, on the same contract: the folder beside a sqlite store and
the `originals` table of a PostgreSQL store (shared by every process, isolated per collection)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.app import Citerag, Collection, Source
from citerag.originals.folder import FolderOriginals
from citerag.originals.postgres import PostgresOriginals
from citerag.service.originals import UPLOAD_SCHEME, forget_original, originals, read_original, save_original
from citerag.settings import Settings
from corpus_paths import DEV_CORPUS

DATA = (DEV_CORPUS / "apa.en.html").read_bytes()
OTHER = (DEV_CORPUS / "pr01.en.html").read_bytes()


@pytest.fixture(params=["folder", "postgres"])
def core(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Citerag]:
    if request.param == "folder":
        settings = Settings(index_dir=tmp_path / "home")
    else:
        settings = Settings(index_dir=tmp_path / "home", store_url=request.getfixturevalue("pg_url"))
    with Citerag.open_home(settings) as app:
        yield app


def test_the_backend_follows_the_store(core: Citerag) -> None:
    collection = core.collection()
    backend = originals(collection)
    expected = PostgresOriginals if collection.settings.store_scheme == "postgresql" else FolderOriginals
    assert isinstance(backend, expected)


def test_saved_bytes_come_back_by_hash_and_go_when_nothing_refers_to_them(core: Citerag) -> None:
    collection = core.collection()
    sha = save_original(collection, DATA)
    assert sha == hashlib.sha256(DATA).hexdigest()
    assert save_original(collection, DATA) == sha  # the same bytes again: stored once, no error
    doc = collection.accept(Source(UPLOAD_SCHEME + "apa.en.html", DATA, "apa.en.html")).document
    assert read_original(collection, doc) == DATA
    assert originals(collection).read("0" * 64) is None
    forget_original(collection, sha)  # the document still refers to them: kept
    assert read_original(collection, doc) == DATA
    other = save_original(collection, OTHER)  # saved, never accepted (a refused upload)
    forget_original(collection, other)
    assert originals(collection).read(other) is None
    collection.delete(doc.id)
    forget_original(collection, sha)
    assert originals(collection).read(sha) is None


def test_a_file_ingested_from_disk_is_served_only_while_it_has_the_indexed_bytes(core: Citerag,
                                                                                  tmp_path: Path) -> None:
    collection = core.collection()
    path = tmp_path / "page.html"
    path.write_bytes(DATA)
    doc = collection.accept(Source(str(path), DATA, "page.html")).document
    assert read_original(collection, doc) == DATA
    path.write_bytes(OTHER)
    assert read_original(collection, doc) is None


def test_postgres_originals_are_shared_by_processes_and_isolated_by_collection(pg_url: str, tmp_path: Path) -> None:
    settings = Settings(index_dir=tmp_path / "home", store_url=pg_url)
    with Citerag.open_home(settings) as first, Citerag.open_home(settings) as second:
        mine: Collection = first.collection()
        sha = save_original(mine, DATA)
        assert originals(second.collection()).read(sha) == DATA  # another process (here: another core) sees it
        theirs = first.create_collection("other", {})
        assert originals(theirs).read(sha) is None
        assert save_original(theirs, DATA) == sha
        forget_original(theirs, sha)
        assert originals(theirs).read(sha) is None and originals(mine).read(sha) == DATA
