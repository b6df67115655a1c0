"""The originals' two backends behind one Protocol, on the same contract: the folder beside a sqlite store and
the `originals` table of a PostgreSQL store (shared by every process, isolated per collection)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.ingest.files import Source
from citerag.originals.folder import FolderOriginals
from citerag.originals.postgres import PostgresOriginals
from citerag.settings import Settings
from citerag.types import UPLOAD_SCHEME
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
    backend = collection.originals
    expected = PostgresOriginals if collection.settings.store_scheme == "postgresql" else FolderOriginals
    assert isinstance(backend, expected)


def test_saved_bytes_come_back_by_hash_and_go_when_nothing_refers_to_them(core: Citerag) -> None:
    collection = core.collection()
    sha = collection.save_original(DATA)
    assert sha == hashlib.sha256(DATA).hexdigest()
    assert collection.save_original(DATA) == sha  # the same bytes again: stored once, no error
    doc = collection.accept(Source(UPLOAD_SCHEME + "apa.en.html", DATA, "apa.en.html")).document
    assert collection.read_original(doc) == DATA
    assert collection.originals.read("0" * 64) is None
    collection.forget_original(sha)  # the document still refers to them: kept
    assert collection.read_original(doc) == DATA
    other = collection.save_original(OTHER)  # saved, never accepted (a refused upload)
    collection.forget_original(other)
    assert collection.originals.read(other) is None
    collection.delete(doc.id)
    collection.forget_original(sha)
    assert collection.originals.read(sha) is None


def test_a_file_ingested_from_disk_is_served_only_while_it_has_the_indexed_bytes(core: Citerag,
                                                                                  tmp_path: Path) -> None:
    collection = core.collection()
    path = tmp_path / "page.html"
    path.write_bytes(DATA)
    doc = collection.accept(Source(str(path), DATA, "page.html")).document
    assert collection.read_original(doc) == DATA
    path.write_bytes(OTHER)
    assert collection.read_original(doc) is None


def test_postgres_originals_are_shared_by_processes_and_isolated_by_collection(pg_url: str, tmp_path: Path) -> None:
    settings = Settings(index_dir=tmp_path / "home", store_url=pg_url)
    with Citerag.open_home(settings) as first, Citerag.open_home(settings) as second:
        mine: Collection = first.collection()
        sha = mine.save_original(DATA)
        assert second.collection().originals.read(sha) == DATA  # another process (here: another core) sees it
        theirs = first.create_collection("other", {})
        assert theirs.originals.read(sha) is None
        assert theirs.save_original(DATA) == sha
        theirs.forget_original(sha)
        assert theirs.originals.read(sha) is None and mine.originals.read(sha) == DATA
