"""The PostgreSQL indexes pass the index contracts (tests/index/index_contract.py), with a database's meaning of
durable: `persist` commits the writer's transaction, and `reopen` is a new connection reading in a REPEATABLE
READ snapshot, as the store's readers do, which later commits leave undisturbed.

Every test's index lives in collection COLLECTION of a fresh database (the `pg_url` fixture) beside a neighbour:
another collection holding rows with the same chunk and document ids, and another embedding model's rows in the
same collection. A leak of either into a search, a count or a removal changes what the contract checks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from index_contract import (
    BM25_FIXTURE,
    Durable,
    LexicalIndexContract,
    VectorIndexContract,
    batch,
    unit,
)
from psycopg import IsolationLevel

from citerag.index import hnsw
from citerag.index.pg_bm25 import PgBm25Index, postings_by_document, term_key
from citerag.index.pgvector import (
    PgVectorIndex,
    approximate_sql,
    exact_sql,
    index_name,
    search_settings,
    vector_literal,
)
from citerag.search.bm25 import BM25
from citerag.store.base import ChunkBatch
from citerag.store.pg_migrate import migrate

COLLECTION, NEIGHBOUR = 7, 8
MODEL, OTHER_MODEL = "test-model", "other-model"
FAR = 1_000_000  # chunk and document ids of the other model's rows, clear of the contract's


def explain(conn: psycopg.Connection[Any], sql: str, params: tuple[Any, ...], generic: bool) -> str:
    """The plan of a statement as the index runs it; `generic`: as a prepared statement's generic plan, where
    the planner knows the parameters' types only."""
    cur = psycopg.ClientCursor(conn)  # parameters written into the text, as EXPLAIN EXECUTE needs
    if not generic:
        return "\n".join(r[0] for r in cur.execute("EXPLAIN " + sql, params))
    numbered = sql
    for i in range(len(params)):
        numbered = numbered.replace("%s", f"${i + 1}", 1)
    cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    cur.execute("PREPARE probe AS " + numbered)
    try:
        return "\n".join(r[0] for r in cur.execute(
            "EXPLAIN EXECUTE probe(" + ", ".join(["%s"] * len(params)) + ")", params))
    finally:
        cur.execute("DEALLOCATE probe")


class PgDatabase(Durable):
    """A fresh migrated database per test, its connections closed after it."""

    url: str
    connections: list[psycopg.Connection[Any]]
    options = ""  # server settings of every connection

    @pytest.fixture(autouse=True)
    def _database(self, pg_url: str) -> Iterator[None]:
        self.url = pg_url
        self.connections = []
        setup = self.connect()
        migrate(setup)
        self.seed(setup)
        setup.commit()
        yield
        for conn in self.connections:
            conn.close()

    def connect(self, isolation: IsolationLevel | None = None) -> psycopg.Connection[Any]:
        conn = psycopg.connect(self.url, options=self.options)
        if isolation is not None:
            conn.isolation_level = isolation
        self.connections.append(conn)
        return conn

    def seed(self, conn: psycopg.Connection[Any]) -> None:
        """The neighbours' rows."""

    def open(self, conn: psycopg.Connection[Any]) -> Any:
        raise NotImplementedError

    def make(self) -> Any:
        return self.open(self.connect())

    def persist(self, index: Any, directory: Path) -> Any:
        state = index.save(directory)
        assert state == {} and not any(directory.iterdir())  # the database holds it all
        index.conn.commit()
        return state

    def reopen(self, directory: Path, state: Any) -> Any:
        reader = self.open(self.connect(IsolationLevel.REPEATABLE_READ))
        len(reader)  # the first statement takes the transaction's snapshot
        return reader


class PgVectorCase(PgDatabase):
    approximate = True

    def seed(self, conn: psycopg.Connection[Any]) -> None:
        # The neighbour's ids and documents are the contract's; some of its vectors are the contract's queries.
        vectors = unit(600, 1234)
        vectors[:4] = np.concatenate([unit(1, 99), unit(1, 42), unit(1, 5), unit(1, 1)])
        neighbour = PgVectorIndex(conn, NEIGHBOUR, MODEL)
        for doc in range(6):
            neighbour.add(batch(doc + 1, 1 + doc * 100, vectors[doc * 100:(doc + 1) * 100]))
        other = np.random.default_rng(7).normal(size=(50, 16)).astype(np.float32)
        other /= np.linalg.norm(other, axis=1, keepdims=True)
        PgVectorIndex(conn, COLLECTION, OTHER_MODEL).add(batch(FAR, FAR, other))

    def open(self, conn: psycopg.Connection[Any]) -> PgVectorIndex:
        return PgVectorIndex(conn, COLLECTION, MODEL, approximate=self.approximate)


class PgBm25Case(PgDatabase):
    def seed(self, conn: psycopg.Connection[Any]) -> None:
        docs = BM25_FIXTURE["docs"]
        PgBm25Index(conn, NEIGHBOUR, MODEL).add(batch(1, 0, unit(len(docs), 1), docs[::-1]))
        PgBm25Index(conn, COLLECTION, OTHER_MODEL).add(batch(FAR, FAR, unit(40, 2), docs[:40]))

    def open(self, conn: psycopg.Connection[Any]) -> PgBm25Index:
        return PgBm25Index(conn, COLLECTION, MODEL)


class TestPgVectorIndexApproximate(PgVectorCase, VectorIndexContract):
    index_type = PgVectorIndex


class TestPgVectorIndexGraph(PgVectorCase, VectorIndexContract):
    """Every search walks the graph: at the contract's few hundred rows the planner would rather score them all."""

    index_type = PgVectorIndex
    options = "-c enable_seqscan=off -c enable_bitmapscan=off -c enable_sort=off"


class TestPgVectorIndexGraphFiltered(TestPgVectorIndexGraph):
    """A filter over more than EXACT_FILTERED_ROWS chunks walks the graph, filtering while it walks: forced here at
    the contract's size (the planner kept on the graph as above)."""

    @pytest.fixture(autouse=True)
    def _walk(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(hnsw, "EXACT_FILTERED_ROWS", 0)


class TestPgVectorIndexExact(PgVectorCase, VectorIndexContract):
    index_type = PgVectorIndex
    approximate = False


class TestPgBm25Index(PgBm25Case, LexicalIndexContract):
    index_type = PgBm25Index


class TestPgVectorIndex(PgVectorCase):
    def test_collections_and_models_never_see_each_others_rows(self) -> None:
        conn = self.connect()
        mine, neighbour = self.open(conn), PgVectorIndex(conn, NEIGHBOUR, MODEL)
        other = PgVectorIndex(conn, COLLECTION, OTHER_MODEL)
        assert len(mine) == 0 and mine.dim == 0 and mine.search(unit(1, 99)[0], 5)[0].tolist() == []
        assert len(neighbour) == 600 and len(other) == 50 and other.dim == 16
        vectors = unit(100, 3)
        mine.add(batch(1, 1, vectors))  # the neighbour's chunk ids 1..100, its document 1
        for index in (mine, PgVectorIndex(conn, COLLECTION, MODEL, approximate=False)):
            q = unit(1, 99)[0]  # the neighbour's chunk 1, exactly
            ids, sims = index.search(q, 100)
            assert sorted(ids.tolist()) == list(range(1, 101)) and sims[0] < 0.9
            np.testing.assert_allclose(index.similarity(q, np.array([1])), [vectors[0] @ q], atol=1e-6)
        with pytest.raises(KeyError):
            mine.similarity(unit(1, 1)[0], np.array([150]))  # the neighbour's, not mine
        mine.remove_documents([1, 2, FAR])
        assert len(mine) == 0 and len(neighbour) == 600
        assert len(other) == 0  # a document's chunks go whole, whatever model they were embedded with
        assert neighbour.search(unit(1, 99)[0], 1)[0].tolist() == [1]

    def test_the_approximate_search_walks_the_partial_hnsw_index_and_the_exact_one_scans(self) -> None:
        conn = self.connect()
        index = self.open(conn)
        # An encoder's size, and rows enough that the planner expects the walk to beat a scan (at ef_search 200,
        # from about 8,000 such rows; below, it scores the collection's rows, which is exact and as fast).
        dim, n = 384, 10_000
        rng = np.random.default_rng(3)
        vectors = rng.normal(size=(n, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        index.add(ChunkBatch(ids=np.arange(10_000, 10_000 + n), document_ids=np.arange(n) // 500,
                             texts=[""] * n, vectors=vectors))  # one batch: the graph is built in one pass
        conn.commit()
        assert conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s",
                            (index_name(dim),)).fetchone() is not None
        queries = rng.normal(size=(20, dim)).astype(np.float32)
        q = vector_literal(queries[0])
        # With statistics (autovacuum's ANALYZE; before it, the planner guesses a handful of rows per collection
        # and scores them all).
        conn.execute("ANALYZE chunk_vectors")
        conn.commit()
        for generic in (False, True):  # also the plan a prepared statement may settle on
            for statement in search_settings(20):
                conn.execute(statement)
            plan = explain(conn, approximate_sql(dim, 20), (q, COLLECTION, MODEL, q), generic)
            assert f"Index Scan using {index_name(dim)}" in plan, plan
            plan = explain(conn, exact_sql(dim, 20), (q, COLLECTION, MODEL), generic)
            assert "hnsw" not in plan and "Seq Scan" in plan, plan
            conn.rollback()
        # Its answers carry the exact similarities, and mostly agree with the exact scan's (independent random
        # 384-d vectors are the graph's worst case, 0.8 here; on real vectors see test_pg_hnsw_recall.py).
        exact = PgVectorIndex(conn, COLLECTION, MODEL, approximate=False)
        found = 0
        for v in queries:
            ids, sims = index.search(v, 10)
            np.testing.assert_allclose(sims, exact.similarity(v, ids), rtol=0, atol=1e-9)
            found += len(set(ids.tolist()) & set(exact.search(v, 10)[0].tolist()))
        assert found / 200 >= 0.6

    def test_a_search_writes_nothing_and_settings_stay_in_its_transaction(self) -> None:
        conn = self.connect()
        index = self.open(conn)
        index.add(batch(1, 1, unit(300, 1)))
        conn.commit()
        reader = self.connect()
        reader.read_only = True  # as on a streaming replica: any write would fail
        index = self.open(reader)
        assert len(index.search(unit(1, 2)[0], 10)[0]) == 10
        index.similarity(unit(1, 2)[0], np.array([1, 2]))
        assert reader.execute("SHOW hnsw.iterative_scan").fetchone() == ("relaxed_order",)
        reader.rollback()
        assert reader.execute("SHOW hnsw.iterative_scan").fetchone() == ("off",)
        reader.rollback()
        reader.autocommit = True  # outside a transaction, search opens one for its SET LOCALs
        assert len(index.search(unit(1, 2)[0], 10)[0]) == 10
        assert reader.execute("SHOW hnsw.iterative_scan").fetchone() == ("off",)

    def test_a_dict_row_connection_and_a_wrong_dimension(self) -> None:
        conn = self.connect()
        conn.row_factory = psycopg.rows.dict_row
        index = self.open(conn)
        index.add(batch(1, 1, unit(20, 1)))
        assert len(index) == 20 and index.dim == 32
        with pytest.raises(ValueError):
            index.search(np.ones(8, dtype=np.float32), 3)  # refused before any SQL: the transaction lives on
        with pytest.raises(ValueError):
            index.add(batch(2, 100, np.ones((2, 8), dtype=np.float32)))
        assert index.search(unit(1, 1)[0], 1)[0].tolist() == [1]

    def test_two_writers_of_a_new_dimension_neither_waits_for_the_other(self) -> None:
        """Both have removed (written) rows first, as the store does: the first to create the index waits for the
        second's commit, so the second must not wait for the first's lock (that would deadlock)."""
        first, second = self.connect(), self.connect()
        a, b = PgVectorIndex(first, 20, "m24"), PgVectorIndex(second, 21, "m24")
        b.remove_documents([1])
        vectors = np.random.default_rng(1).normal(size=(40, 24)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        failed: list[BaseException] = []

        def create() -> None:
            try:
                a.remove_documents([1])
                a.add(batch(1, 1, vectors[:20]))  # creates the index: waits for `second` to commit
                first.commit()
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                failed.append(exc)

        thread = threading.Thread(target=create)
        thread.start()
        watcher = self.connect()
        watcher.autocommit = True
        deadline = time.monotonic() + 20
        while not watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
            assert time.monotonic() < deadline and thread.is_alive() and not failed, failed
            time.sleep(0.02)
        b.add(batch(1, 1, vectors[20:]))  # the index is being made: goes on without
        second.commit()
        thread.join(30)
        assert not thread.is_alive() and not failed, failed
        assert watcher.execute("SELECT to_regclass(%s) IS NOT NULL", (index_name(24),)).fetchone() == (True,)
        assert a.search(vectors[5], 1)[0].tolist() == [6] and b.search(vectors[25], 1)[0].tolist() == [6]


class TestPgBm25(PgBm25Case):
    def test_collections_and_models_never_see_each_others_rows(self) -> None:
        docs = BM25_FIXTURE["docs"]
        conn = self.connect()
        mine, neighbour = self.open(conn), PgBm25Index(conn, NEIGHBOUR, MODEL)
        other = PgBm25Index(conn, COLLECTION, OTHER_MODEL)
        assert len(mine) == 0 and mine.search(BM25_FIXTURE["queries"][0], 5)[0].tolist() == []
        assert len(neighbour) == len(docs) and len(other) == 40
        texts = docs[100:150]
        mine.add(batch(1, 0, unit(50, 1), texts))  # the neighbour's chunk ids and document
        reference = BM25(texts)
        for query in BM25_FIXTURE["queries"][:20]:
            ids, scores = mine.search(query, 50)
            expected = reference.scores(query)
            assert set(ids.tolist()) == set(np.flatnonzero(expected > 0).tolist())
            np.testing.assert_allclose(scores, expected[ids], rtol=0, atol=1e-9)
        mine.remove_documents([1, FAR])
        assert len(mine) == 0 and len(other) == 0 and len(neighbour) == len(docs)
        full = BM25(docs[::-1])
        query = BM25_FIXTURE["queries"][3]
        ids, scores = neighbour.search(query, len(docs))
        np.testing.assert_allclose(scores, full.scores(query)[ids], rtol=0, atol=1e-9)
        assert postings_by_document(conn, COLLECTION) == {}

    def test_repeated_query_words_and_very_long_words(self) -> None:
        long_word = "ab" * 2000  # past a B-tree entry's size: kept by its digest
        texts = ["apt get install apt", "install the package", f"a dump {long_word} here", "apt apt apt"]
        index = self.open(self.connect())
        index.add(batch(1, 1, unit(4, 1), texts))
        reference = BM25(texts)
        for query in ("apt apt install", "install apt", f"{long_word} dump {long_word}", "APT-get!"):
            ids, scores = index.search(query, 10)
            expected = reference.scores(query)
            assert ids.tolist() == [i + 1 for i in np.lexsort((np.arange(4), -expected)) if expected[i] > 0]
            np.testing.assert_allclose(scores, expected[ids - 1], rtol=0, atol=1e-9)
        assert term_key(long_word).startswith("#") and term_key("apt") == "apt"
        assert index.search("", 5)[0].tolist() == [] and index.search("apt", 0)[0].tolist() == []

    def test_stemmed_postings_are_kept_apart_and_score_as_the_embedded_index(self) -> None:
        from citerag.app.files import extract_file
        from citerag.chunk import chunk_extracted
        from citerag.index.analyzer import Analyzer

        corpus = Path(__file__).resolve().parents[2] / "eval" / "debian-reference-de" / "corpus"
        texts = [c.text for c in chunk_extracted(extract_file(corpus / "ch01.de.html"), "E", 512)][:60]
        stemmed = Analyzer("stemmed")
        conn = self.connect()
        reference_index = self.open(conn)
        index = PgBm25Index(conn, COLLECTION, MODEL, analyzer=stemmed)
        assert index.model == f"{MODEL}|stemmed" and len(index) == 0  # not the reference's rows
        index.add(batch(1, 1, unit(len(texts), 1), texts))
        assert len(reference_index) == 0
        expected_index = BM25(texts, analyzer=stemmed)
        for query in ("Größe der Dateien", "Benutzerkonten und Gruppen", "Dateiberechtigung"):
            ids, scores = index.search(query, 60)
            expected = expected_index.scores(query)
            assert set(ids.tolist()) == {i + 1 for i in np.flatnonzero(expected > 0)}
            np.testing.assert_allclose(scores, expected[ids - 1], rtol=0, atol=1e-9)
        assert index.search("Dateiberechtigung", 5)[0].size  # a stem of "Dateiberechtigungen"
        assert reference_index.search("Dateiberechtigung", 5)[0].size == 0
