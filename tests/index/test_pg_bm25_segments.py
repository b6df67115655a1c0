"""The PostgreSQL BM25 index's segments (citerag.index.pg_bm25, schema version 5): after any sequence of adds,
removals and the merges they set off, and with writers in concurrent transactions, the top k (ids, ties by id)
equals the reference formula's over the live chunks of real dev-set text, scores to 1e-9; N, the lengths and
every posting stay exact; and a database migrated from the rows layout (version 4) scores the same.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from functools import cache
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import IsolationLevel

from citerag.app.files import extract_file
from citerag.chunk import chunk_extracted
from citerag.index import pg_bm25, pg_bm25_segments
from citerag.index.analyzer import REFERENCE
from citerag.index.base import Allowed
from citerag.index.pg_bm25 import PgBm25Index, merge_plan, postings_by_document, term_key, tier
from citerag.search.bm25 import BM25
from citerag.store.base import ChunkBatch
from citerag.store.pg_migrate import migrate, migrations
from corpus_paths import DEV_SET, HTML_FILES

COLLECTION, NEIGHBOUR, MODEL = 3, 4, "m"


@cache
def dev_texts() -> list[str]:
    """The dev set's real chunks (strategy E, as ingested), then its questions (short texts, many words shared)."""
    import json

    chunks = [c.text for path in HTML_FILES for c in chunk_extracted(extract_file(path), "E", 512)]
    questions = [json.loads(line)["query"] for line in (DEV_SET / "questions.jsonl").read_text().splitlines()]
    return chunks + questions


@cache
def dev_queries() -> list[str]:
    import json

    lines = (DEV_SET / "questions.jsonl").read_text().splitlines()
    return [json.loads(line)["query"] for line in lines][::4] + ["the", "package package install", "zqxjv"]


class Live:
    """What the index should hold: the live chunks by document, and the reference's top k over them."""

    def __init__(self) -> None:
        self.docs: dict[int, dict[int, str]] = {}
        self.next_id = 1

    def version(self, doc: int, texts: list[str]) -> ChunkBatch:
        ids = np.arange(self.next_id, self.next_id + len(texts), dtype=np.int64)
        self.next_id += len(texts)
        self.docs[doc] = dict(zip(ids.tolist(), texts, strict=True))
        return ChunkBatch(ids=ids, document_ids=np.full(len(ids), doc, dtype=np.int64), texts=texts,
                          vectors=np.zeros((len(ids), 0), dtype=np.float32))

    def texts(self) -> dict[int, str]:
        return {cid: t for chunks in self.docs.values() for cid, t in chunks.items()}

    def postings(self) -> dict[int, int]:
        return {doc: sum(len(set(map(term_key, REFERENCE.terms(t)))) for t in chunks.values())
                for doc, chunks in self.docs.items() if chunks}

    def top(self, query: str, k: int) -> tuple[list[int], np.ndarray]:
        """The reference's k best live chunks (ties by id) and their scores."""
        texts = self.texts()
        ids = np.array(sorted(texts), dtype=np.int64)
        if not len(ids):
            return [], np.zeros(0)
        expected = BM25([texts[i] for i in ids.tolist()]).scores(query)
        scoring = np.flatnonzero(expected > 0)
        order = scoring[np.lexsort((ids[scoring], -expected[scoring]))][:k]
        return ids[order].tolist(), expected[order]

    def check(self, index: PgBm25Index, k: int = 10) -> None:
        texts = self.texts()
        assert len(index) == len(texts)
        reference = BM25([texts[i] for i in sorted(texts)]) if texts else None
        for query in dev_queries():
            for depth in (k, len(texts)):
                want_ids, want = self.top(query, depth)
                got_ids, got = index.search(query, depth)
                assert got_ids.tolist() == want_ids, query
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
            mass = reference.query_mass(query) if reference else 0.0
            assert index.query_mass(query) == pytest.approx(mass, abs=1e-9)


def segments(conn: psycopg.Connection[Any], collection: int = COLLECTION) -> list[tuple[int, int, int]]:
    return [(int(s), int(n), int(r)) for s, n, r in conn.execute(
        "SELECT s.segment, s.chunks, (SELECT count(*) FROM bm25_removed r WHERE r.collection_id = s.collection_id"
        " AND r.model = s.model AND r.segment = s.segment) FROM bm25_segments s WHERE s.collection_id = %s"
        " ORDER BY s.segment", (collection,)).fetchall()]


@pytest.fixture()
def url(pg_url: str) -> str:
    with psycopg.connect(pg_url) as conn:
        migrate(conn)
    return pg_url


@pytest.fixture()
def factor_4(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiers of four segments: the tests below count on when merges happen."""
    monkeypatch.setattr(pg_bm25_segments, "TIER_FACTOR", 4)


@pytest.fixture()
def connect(url: str) -> Iterator[Any]:
    opened: list[psycopg.Connection[Any]] = []

    def make(isolation: IsolationLevel | None = None, options: str = "") -> psycopg.Connection[Any]:
        conn = psycopg.connect(url, options=options)
        conn.isolation_level = isolation
        opened.append(conn)
        return conn

    yield make
    for conn in opened:
        conn.close()


def test_merge_plan_rewrites_removed_chunks_first_then_full_tiers() -> None:
    f, base = pg_bm25.TIER_FACTOR, pg_bm25.TIER_BASE
    assert [tier(n) for n in (0, base - 1, base, base * f - 1, base * f, base * f * f)] == [0, 0, 1, 1, 2, 3]
    small = [(i, 50, 0) for i in range(1, f)]  # one short of a full tier 0
    assert merge_plan([]) == [] and merge_plan(small) == []
    assert merge_plan([*small, (f, 10, 0)]) == list(range(1, f + 1))
    assert merge_plan([(100, base * f * f, 0), *small, (200, base * f, 0), (f, 1, 0)]) == list(range(1, f + 1))
    big = base * f * f
    assert merge_plan([(100, big, big // 4), *small, (f, 10, 0)]) == [100]  # removed chunks first
    assert merge_plan([(100, big, big // 4 - 1)]) == [] and merge_plan([(1, 3, 3)]) == [1]


def test_top_k_equals_the_reference_after_adds_removals_and_merges(connect: Any, factor_4: None) -> None:
    """Real text, documents of 1 to 40 chunks added, replaced and removed at random, committed after each step:
    every few steps the top 10 and the full ranking equal the reference's over the live chunks; the segments
    stay few, and the postings are exactly the live chunks' distinct words."""
    texts, rng = dev_texts(), np.random.default_rng(5)
    conn = connect()
    index, live = PgBm25Index(conn, COLLECTION, MODEL), Live()
    PgBm25Index(conn, NEIGHBOUR, MODEL).add(Live().version(1, texts[:300]))  # same ids, another collection
    at, merged = 0, 0
    for step in range(120):
        doc = int(rng.integers(30))
        if doc in live.docs and rng.random() < 0.4:
            index.remove_documents([doc])
            del live.docs[doc]
        else:
            size = int(rng.integers(1, 41))
            chunk_texts = [texts[(at + i) % len(texts)] for i in range(size)]
            at += size
            index.remove_documents([doc])
            before = len(segments(conn))
            index.add(live.version(doc, chunk_texts))
            merged += len(segments(conn)) <= before
        conn.commit()
        if step % 20 == 19:
            live.check(index)
            assert postings_by_document(conn, COLLECTION) == live.postings()
    assert merged >= 10  # merges ran: tiers filled and removed chunks were rewritten away
    found = segments(conn)
    assert not any(r >= pg_bm25.REMOVED_FRACTION * n for _, n, r in found)
    assert max(Counter(tier(n - r) for _, n, r in found).values()) < pg_bm25.TIER_FACTOR
    # Everything removed: nothing scores, nothing is left after the next add's merge but that add.
    index.remove_documents(list(live.docs))
    live.docs.clear()
    conn.commit()
    live.check(index)
    index.add(live.version(99, texts[:3]))
    conn.commit()
    live.check(index)
    assert len(PgBm25Index(conn, NEIGHBOUR, MODEL)) == 300


def test_a_reader_keeps_its_snapshot_while_a_writer_merges(connect: Any, factor_4: None) -> None:
    texts = dev_texts()
    writer, live = connect(), Live()
    index = PgBm25Index(writer, COLLECTION, MODEL)
    for doc in range(3):
        index.add(live.version(doc, texts[doc * 20:(doc + 1) * 20]))
    writer.commit()
    reader = PgBm25Index(connect(IsolationLevel.REPEATABLE_READ), COLLECTION, MODEL)
    before = [reader.search(q, 10) for q in dev_queries()]
    index.remove_documents([1])
    del live.docs[1]
    index.add(live.version(3, texts[100:120]))  # document 1's segment is rewritten away (to nothing)
    index.add(live.version(4, texts[200:220]))  # the fourth tier-0 segment: all four merge
    writer.commit()
    assert [(n, r) for _, n, r in segments(writer)] == [(80, 0)]
    after = [reader.search(q, 10) for q in dev_queries()]
    assert [(i.tolist(), s.tolist()) for i, s in before] == [(i.tolist(), s.tolist()) for i, s in after]
    live.check(PgBm25Index(connect(), COLLECTION, MODEL))


def test_concurrent_writers_keep_every_count_exact(connect: Any) -> None:
    """Four writers add, replace and remove their own documents in one collection at once, each in its own
    transactions (merges included, claimed or skipped as they meet each other): afterwards N, the postings and
    every score are those of the live chunks."""
    texts = dev_texts()
    lives = [Live() for _ in range(4)]
    failures: list[BaseException] = []

    def write(w: int) -> None:
        try:
            conn, rng = connect(), np.random.default_rng(w)
            index, live = PgBm25Index(conn, COLLECTION, MODEL), lives[w]
            live.next_id = 1 + w * 1_000_000
            for _ in range(40):
                doc = 1000 * w + int(rng.integers(8))
                index.remove_documents([doc])
                live.docs.pop(doc, None)
                if rng.random() < 0.8:
                    first = int(rng.integers(len(texts) - 30))
                    index.add(live.version(doc, texts[first:first + int(rng.integers(1, 30))]))
                conn.commit()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not failures, failures
    everything = Live()
    for live in lives:
        everything.docs.update(live.docs)
    conn = connect()
    assert postings_by_document(conn, COLLECTION) == everything.postings()
    everything.check(PgBm25Index(conn, COLLECTION, MODEL))


def _wait_for_a_lock_wait(conn: psycopg.Connection[Any], thread: threading.Thread) -> None:
    deadline = time.monotonic() + 30
    while not conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)


def test_a_removal_that_meets_a_merge_removes_the_chunk_where_the_merge_put_it(connect: Any, factor_4: None) -> None:
    texts = dev_texts()
    writer, live = connect(), Live()
    index = PgBm25Index(writer, COLLECTION, MODEL)
    for doc in range(3):
        index.add(live.version(doc, texts[doc * 10:(doc + 1) * 10]))
    writer.commit()
    index.add(live.version(3, texts[50:60]))  # merges all four, uncommitted: their chunks' rows are locked
    assert len(segments(writer)) == 1
    remover = PgBm25Index(connect(), COLLECTION, MODEL)
    thread = threading.Thread(target=lambda: (remover.remove_documents([1]), remover.conn.commit()))
    thread.start()
    watcher = connect()
    watcher.autocommit = True
    _wait_for_a_lock_wait(watcher, thread)
    writer.commit()
    thread.join(30)
    assert not thread.is_alive()
    del live.docs[1]
    [(segment, chunks, removed)] = segments(writer)
    assert (chunks, removed) == (40, 10)  # recorded against the merged segment
    live.check(PgBm25Index(connect(), COLLECTION, MODEL))
    assert postings_by_document(writer, COLLECTION) == live.postings()


def test_a_merge_that_meets_an_open_removal_waits_for_nothing_and_is_skipped(connect: Any, factor_4: None) -> None:
    texts = dev_texts()
    writer, live = connect(options="-c lock_timeout=10s"), Live()  # a merge that waited would fail, not hang
    index = PgBm25Index(writer, COLLECTION, MODEL)
    for doc in range(3):
        index.add(live.version(doc, texts[doc * 10:(doc + 1) * 10]))
    writer.commit()
    remover = connect()
    PgBm25Index(remover, COLLECTION, MODEL).remove_documents([2])  # open: chunk rows of segment 3 held
    started = time.monotonic()
    index.add(live.version(3, texts[50:60]))  # the merge meets the held rows: NOWAIT, rolled back, the add kept
    assert time.monotonic() - started < 5 and len(segments(writer)) == 4
    writer.commit()
    remover.commit()
    del live.docs[2]
    live.check(PgBm25Index(connect(), COLLECTION, MODEL))
    index.add(live.version(4, texts[70:75]))  # now nothing holds them
    writer.commit()
    assert len(segments(writer)) == 1
    live.check(index)


@pytest.mark.parametrize("filtered", [False, True])
def test_a_read_committed_search_reads_again_when_a_merge_moves_its_chunks(connect: Any, factor_4: None,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          filtered: bool) -> None:
    """Outside a REPEATABLE READ transaction each statement has its own snapshot: a merge that commits between a
    search's read and its chunk-id lookup has deleted the segments it read, and the search starts again (a
    filtered one too: its allowed positions were read with the postings)."""
    texts = dev_texts()
    writer, live = connect(), Live()
    index = PgBm25Index(writer, COLLECTION, MODEL)
    for doc in range(3):
        index.add(live.version(doc, texts[doc * 10:(doc + 1) * 10]))
    writer.commit()
    reader = connect()
    reader.autocommit = True
    read, merged = PgBm25Index._read, []

    def read_then_merge(self: PgBm25Index, cur: Any, terms: list[str], full: bool, documents: Any = None,
                        visible: Any = None) -> Any:
        found = read(self, cur, terms, full, documents, visible)
        if not merged:
            merged.append(True)
            index.add(live.version(3, texts[50:60]))  # the fourth segment: all four merge
            writer.commit()
        return found

    monkeypatch.setattr(PgBm25Index, "_read", read_then_merge)
    query = "How do I list the files of an installed package?"
    allowed = Allowed.of([0, 2, 3], 30) if filtered else None  # document 3: added by the merging writer
    ids, scores = PgBm25Index(reader, COLLECTION, MODEL).search(query, 20, allowed)
    assert merged and len(segments(writer)) == 1
    want_ids, want = live.top(query, 200)
    if filtered:  # the unfiltered ranking's chunks of those documents, with the same scores
        keep = [i for i, cid in enumerate(want_ids) if cid not in live.docs[1]]
        want_ids, want = [want_ids[i] for i in keep], want[keep]
    want_ids, want = want_ids[:20], want[:20]
    assert ids.tolist() == want_ids and any(i > 30 for i in want_ids)  # document 3's chunks among them
    np.testing.assert_allclose(scores, want, rtol=0, atol=1e-9)


def test_a_repeatable_read_writer_does_not_merge(connect: Any) -> None:
    texts = dev_texts()
    writer, live = connect(IsolationLevel.REPEATABLE_READ), Live()
    index = PgBm25Index(writer, COLLECTION, MODEL)
    for doc in range(6):
        index.add(live.version(doc, texts[doc * 10:(doc + 1) * 10]))
        writer.commit()
    assert len(segments(writer)) == 6
    live.check(index)


def test_an_autocommit_connection_writes_each_add_whole(connect: Any) -> None:
    conn = connect()
    conn.autocommit = True
    index, live = PgBm25Index(conn, COLLECTION, MODEL), Live()
    index.add(live.version(1, dev_texts()[:30]))
    with pytest.raises(psycopg.errors.UniqueViolation):
        index.add(ChunkBatch(ids=np.array([31, 1]), document_ids=np.array([2, 2]), texts=["a b", "c d"],
                             vectors=np.zeros((2, 0), dtype=np.float32)))
    assert len(segments(conn)) == 1  # the failed add left nothing
    live.check(index)


def test_a_database_with_the_rows_layout_migrates_to_the_same_scores(pg_url: str) -> None:
    """Version 4's tables, written as its index wrote them (lexical_chunks rows and one postings row per
    (term, chunk)), in two collections and two models; migrated to version 5, they score as the reference."""
    texts = dev_texts()
    conn = psycopg.connect(pg_url)  # a fresh database: brought to version 4 here
    try:
        conn.execute("CREATE TABLE citerag_schema (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                     " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())")
        for version, name, sql in migrations():
            if version <= 4:
                conn.execute(sql)
                conn.execute("INSERT INTO citerag_schema (version, name) VALUES (%s, %s)", (version, name))
        lives = {(COLLECTION, MODEL): Live(), (COLLECTION, "other"): Live(), (NEIGHBOUR, MODEL): Live()}
        for n, ((collection, model), live) in enumerate(lives.items()):
            live.next_id = 1 + 100_000 * n
            for doc in range(5):
                batch = live.version(doc + 10 * n, texts[(doc + n) * 37:(doc + n) * 37 + 25])
                for cid, text in zip(batch.ids.tolist(), batch.texts, strict=True):
                    words = Counter(map(term_key, REFERENCE.terms(text)))
                    conn.execute("INSERT INTO lexical_chunks (collection_id, chunk_id, document_id, model, length)"
                                 " VALUES (%s, %s, %s, %s, %s)",
                                 (collection, cid, doc + 10 * n, model, sum(words.values())))
                    for term, tf in words.items():
                        conn.execute("INSERT INTO postings VALUES (%s, %s, %s, %s)", (collection, term, cid, tf))
        conn.commit()
        assert migrate(conn) == [v for v, _, _ in migrations() if v > 4]
        assert conn.execute("SELECT to_regclass('postings')").fetchone() == (None,)
        for (collection, model), live in lives.items():
            live.check(PgBm25Index(conn, collection, model))
        for collection in (COLLECTION, NEIGHBOUR):
            expected = [live.postings() for (c, _), live in lives.items() if c == collection]
            assert postings_by_document(conn, collection) == {d: n for counts in expected for d, n in counts.items()}
        # And it goes on as any version-5 index: a removal, an add (with a merge), the same scores.
        index, live = PgBm25Index(conn, COLLECTION, MODEL), lives[(COLLECTION, MODEL)]
        index.remove_documents([1])
        del live.docs[1]
        for doc in range(20, 24):
            index.add(live.version(doc, texts[doc * 11:doc * 11 + 9]))
        conn.commit()
        live.check(index)
    finally:
        conn.close()
