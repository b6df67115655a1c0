"""BM25 inside PostgreSQL, in the caller's transaction, scoring exactly as the reference formula
(citerag.search.bm25).

The postings are arrays in immutable segments (schema version 5, pg_schema/0005_bm25_segments.sql): each add
writes one segment, its chunks at positions 0.., and per term one bm25_terms row holding the positions of the
chunks with that term, their term frequencies and their lengths, as big-endian int4 byte strings. A query reads
its words' rows (a few per word: one per segment holding it) in one statement and scores them with numpy over
dense positions, which is what makes it fast: the postings of a stop word are a few byte strings, not a hundred
thousand index entries (100,000 chunks, the 80 dev questions: p50 254 ms as rows, 12 ms as arrays, p95 438 and
24 ms, on 2 shared CPUs; benchmarks/bench_pg_bm25.py).

As in the embedded index (citerag.index.bm25), nothing derived from the collection as a whole is stored: N,
the document frequencies and the mean length are computed per query over the live chunks (the segments'
counts less the removed chunks, recorded in bm25_removed; each word's live positions), in the same statement,
so they are one snapshot's; the arithmetic is the embedded index's own numpy code, in the same order, so a
score after any sequence of updates equals a fresh build's to the last bit. Removal only records removed
positions; a writer merges segments (tiers, and those with many removed chunks) at the end of an add.

Concurrent writers never wait for each other here except when a removal meets a merge (it waits for that
merge to commit, then removes the chunk where the merge put it): adds insert rows under new ids, removals
delete their own lexical_chunks rows, and a merge claims its segments with SKIP LOCKED and the chunks' rows with
NOWAIT, and is skipped (rolled back to its savepoint) when another transaction holds any of them. Merges run
only under READ COMMITTED (the store's writers): there a statement sees what committed before it.

The tokenisation (citerag.index.analyzer) is part of the rows' key: the `model` column holds the embedding
model for the reference's tokens and "MODEL|stemmed" for stemmed ones (`lexical_key`), so postings of one
tokenisation are never scored with another's query terms; DatabaseSearch refuses a search whose tokenisation
the collection has no rows for. PostgreSQL's text search (ts_rank) weighs differently and is not used.

Nothing here commits (an autocommit connection gets one transaction per add), and search writes nothing.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import Connection, Cursor
from psycopg.rows import TupleRow, tuple_row

from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import Allowed, idf_mass
from citerag.index.pg_bm25_segments import (
    INT4,
    INT8,
    REMOVED_FRACTION,
    TIER_BASE,
    TIER_FACTOR,
    merge,
    merge_plan,
    postings_by_document,
    tier,
    unpack,
    write_terms,
)
from citerag.lang import DEFAULT
from citerag.store.base import ChunkBatch

# Everything a query reads, in one statement (so one snapshot, whatever the isolation level): kind 0, the
# segments (id, positions, total length); kind 1, the removed chunks (count, summed length, their segments and
# positions as arrays); kind 2, the query words' rows: their postings' count and, when %(full)s, their data
# (positions, tfs, lengths), else only the positions and only where the segment has removed chunks (elsewhere
# the count is the live count).
_READ = """
SELECT 0, segment, NULL::text, chunks::bigint, length, NULL::bytea, NULL::bytea
FROM bm25_segments WHERE collection_id = %(c)s AND model = %(m)s
UNION ALL
SELECT 1, NULL, NULL, count(*), COALESCE(sum(length), 0),
       string_agg(int8send(segment), ''::bytea ORDER BY segment, position),
       string_agg(int4send(position), ''::bytea ORDER BY segment, position)
FROM bm25_removed WHERE collection_id = %(c)s AND model = %(m)s
UNION ALL
SELECT 2, segment, term, postings, NULL,
       CASE WHEN %(full)s THEN data
            WHEN segment IN (SELECT r.segment FROM bm25_removed r WHERE r.collection_id = %(c)s AND r.model = %(m)s)
            THEN substring(data FROM 1 FOR 4 * postings) END,
       NULL
FROM bm25_terms WHERE collection_id = %(c)s AND model = %(m)s AND term = ANY(%(terms)s)
"""
# A filtered search's kind 3, in the same statement: the allowed documents' live chunks (count, their segments and
# positions as arrays), placed in the snapshot the postings are read in (a merge may move them between statements).
_READ_ALLOWED = """
UNION ALL
SELECT 3, NULL, NULL, count(*), NULL,
       string_agg(int8send(segment), ''::bytea ORDER BY segment, position),
       string_agg(int4send(position), ''::bytea ORDER BY segment, position)
FROM lexical_chunks WHERE collection_id = %(c)s AND model = %(m)s AND document_id = ANY(%(docs)s::bigint[])
"""
# A search for a caller who may read only some documents, kind 4: their live chunks (count, summed length, their
# segments and positions), over which N, df and the mean length are counted (Allowed.visible).
_READ_VISIBLE = """
UNION ALL
SELECT 4, NULL, NULL, count(*), COALESCE(sum(length), 0),
       string_agg(int8send(segment), ''::bytea ORDER BY segment, position),
       string_agg(int4send(position), ''::bytea ORDER BY segment, position)
FROM lexical_chunks WHERE collection_id = %(c)s AND model = %(m)s AND document_id = ANY(%(visible)s::bigint[])
"""
# The chunk ids at (segment, position): eight bytes each, read without the rest of the segment's array.
_CHUNK_IDS = """
SELECT w.i, substring(s.chunk_ids FROM w.position * 8 + 1 FOR 8)
FROM unnest(%s::bigint[], %s::int4[], %s::int4[]) AS w(segment, position, i)
JOIN bm25_segments s ON s.collection_id = %s AND s.model = %s AND s.segment = w.segment
"""
_LIVE_COUNT = """
SELECT (SELECT COALESCE(sum(chunks), 0) FROM bm25_segments WHERE collection_id = %(c)s AND model = %(m)s)
     - (SELECT count(*) FROM bm25_removed WHERE collection_id = %(c)s AND model = %(m)s)
"""
MAX_TERM_CHARS = 256


def lexical_key(model: str, analyzer: Analyzer) -> str:
    """The value of lexical_chunks.model for an embedding model's postings made by this analyzer."""
    return model if analyzer.name == REFERENCE.name else f"{model}|{analyzer.name}"


def term_key(word: str) -> str:
    """A word as stored: a very long one (a hex dump, base64) by its digest, as a B-tree entry is at most about
    2.7 kB and an over-long one would abort the writer's transaction. '#' is never in a token, so a digest cannot
    equal a word; a query's words are keyed alike, so such a word still matches exactly."""
    if len(word) <= MAX_TERM_CHARS:
        return word
    return "#" + hashlib.sha256(word.encode("utf-8")).hexdigest()  # UTF-8: the same bytes as ASCII for ASCII words


@dataclass
class _Read:
    """One snapshot's view of a query's words: live count and length, and each word's live postings at dense
    positions (a segment's positions follow the previous segment's)."""

    n: int
    total: int
    size: int  # positions over all segments, removed ones included
    segments: np.ndarray  # segment ids, ascending
    offsets: np.ndarray  # each segment's first dense position
    postings: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]  # positions, tfs, lengths (full reads only)
    df: dict[str, int]
    allowed: np.ndarray | None = None  # a filtered read's: the dense positions of the allowed live chunks


class _Moved(Exception):
    """A merge committed between a search's statements (READ COMMITTED): read again."""


class PgBm25Index:
    """The LexicalIndex of one (collection, embedding model): its segments of postings (see the module)."""

    kind = "pg-bm25"

    def __init__(self, conn: Connection[Any], collection_id: int, model: str, *, k1: float = 1.2,
                 b: float = 0.75, analyzer: Analyzer = REFERENCE) -> None:
        self.conn = conn
        self.collection_id = int(collection_id)
        self.analyzer = analyzer
        self.model = lexical_key(model, analyzer)
        self.k1, self.b = float(k1), float(b)

    @contextmanager
    def _cursor(self, binary: bool = False) -> Iterator[Cursor[TupleRow]]:
        # Its own row factory: the caller's connection may return dicts.
        with self.conn.cursor(row_factory=tuple_row, binary=binary) as cur:
            yield cur

    @contextmanager
    def _writing(self) -> Iterator[Cursor[TupleRow]]:
        """The caller's transaction, or one of its own on an autocommit connection (an add is whole)."""
        if self.conn.autocommit:
            with self.conn.transaction(), self._cursor() as cur:
                yield cur
        else:
            with self._cursor() as cur:
                yield cur

    def __len__(self) -> int:
        with self._cursor() as cur:
            row = cur.execute(_LIVE_COUNT, {"c": self.collection_id, "m": self.model}).fetchone()
        return int(row[0]) if row else 0

    def add(self, batch: ChunkBatch) -> None:
        """Tokenise the batch's texts and write them as a new segment (binary COPY), then merge segments if the
        tiers call for it; its chunk ids must not be in the collection already."""
        if not len(batch):
            return
        ids = np.asarray(batch.ids, dtype=np.int64)
        documents = np.asarray(batch.document_ids, dtype=np.int64).tolist()
        counts = [Counter(map(term_key, self.analyzer.terms(text))) for text in batch.texts]
        lengths = np.array([sum(words.values()) for words in counts], dtype=np.int64)
        by_term: dict[str, tuple[list[int], list[int]]] = {}
        for position, words in enumerate(counts):
            for term, tf in words.items():
                positions, tfs = by_term.setdefault(term, ([], []))
                positions.append(position)
                tfs.append(tf)
        terms = list(by_term)
        bounds = np.cumsum([0, *(len(by_term[t][0]) for t in terms)])
        where = np.fromiter((p for t in terms for p in by_term[t][0]), dtype=np.int64, count=int(bounds[-1]))
        frequencies = np.fromiter((f for t in terms for f in by_term[t][1]), dtype=np.int64, count=int(bounds[-1]))
        with self._writing() as cur:
            row = cur.execute("SELECT nextval('bm25_segment_ids'), current_setting('transaction_isolation')").fetchone()
            assert row is not None
            segment, isolation = int(row[0]), str(row[1])
            with cur.copy("COPY lexical_chunks (collection_id, chunk_id, document_id, model, length, segment, position)"
                          " FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "int8", "int8", "text", "int4", "int8", "int4"])
                for position, (cid, doc, length) in enumerate(zip(ids.tolist(), documents, lengths.tolist(),
                                                                  strict=True)):
                    copy.write_row((self.collection_id, cid, doc, self.model, length, segment, position))
            cur.execute("INSERT INTO bm25_segments (collection_id, model, segment, chunks, length, chunk_ids)"
                        " VALUES (%s, %s, %s, %s, %s, %s)",
                        (self.collection_id, self.model, segment, len(ids), int(lengths.sum()),
                         ids.astype(INT8).tobytes()))
            write_terms(cur, self.collection_id, self.model, segment, terms, bounds, where, frequencies, lengths[where])
            if isolation == "read committed":  # an older snapshot could miss a removal that committed since
                merge(self.conn, cur, self.collection_id, self.model)

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        """Remove these documents' chunks, of every model: their lexical_chunks rows go, their positions are
        recorded as removed (a document's chunk ids are replaced whole)."""
        docs = [int(d) for d in document_ids]
        if not docs:
            return
        with self._writing() as cur:
            cur.execute("WITH gone AS (DELETE FROM lexical_chunks WHERE collection_id = %(c)s"
                        " AND document_id = ANY(%(docs)s) RETURNING model, segment, position, length)"
                        " INSERT INTO bm25_removed (collection_id, model, segment, position, length)"
                        " SELECT %(c)s, model, segment, position, length FROM gone",
                        {"c": self.collection_id, "docs": docs})

    # Reading
    def _read(self, cur: Cursor[TupleRow], terms: list[str], full: bool, documents: list[int] | None = None,
              visible: list[int] | None = None) -> _Read:
        full = full or visible is not None  # the visible chunks' postings are told apart by their positions
        params = {"c": self.collection_id, "m": self.model, "terms": sorted(set(terms)), "full": full,
                  "docs": documents, "visible": visible}
        same = documents is not None and documents == visible  # a reader without other filters: read them once
        rows = cur.execute(_READ + (_READ_ALLOWED if documents is not None and not same else "")
                           + (_READ_VISIBLE if visible is not None else ""), params).fetchall()
        segments = sorted((int(r[1]), int(r[3]), int(r[4])) for r in rows if r[0] == 0)
        ids = np.array([s[0] for s in segments], dtype=np.int64)
        sizes = np.array([s[1] for s in segments], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        removed = next(r for r in rows if r[0] == 1)
        n = int(sizes.sum()) - int(removed[3])
        total = sum(s[2] for s in segments) - int(removed[4])
        live: np.ndarray | None = None
        if removed[3]:
            live = np.ones(int(offsets[-1]), dtype=bool)
            where = np.frombuffer(removed[5], dtype=INT8)
            live[offsets[np.searchsorted(ids, where)] + np.frombuffer(removed[6], dtype=INT4)] = False
        found = sorted((r for r in rows if r[0] == 2), key=lambda r: str(r[2]))  # by term: postings in one run
        first = offsets[np.searchsorted(ids, np.array([int(r[1]) for r in found], dtype=np.int64))]
        counts = np.array([int(r[3]) for r in found], dtype=np.int64)
        is_new = np.array([i == 0 or found[i][2] != found[i - 1][2] for i in range(len(found))], dtype=bool)
        words = [str(r[2]) for r, new in zip(found, is_new.tolist(), strict=True) if new]
        term_of = np.cumsum(is_new) - 1  # each row's word
        df: dict[str, int] = {}
        if not full:  # a row's count, or its live positions where its segment has removed chunks
            per_word = np.zeros(len(words), dtype=np.int64)
            for i, row in enumerate(found):
                per_word[term_of[i]] += int(row[3]) if row[5] is None or live is None else \
                    int(live[first[i] + np.frombuffer(row[5], dtype=INT4)].sum())
            return _Read(n, total, int(offsets[-1]), ids, offsets, {}, dict(zip(words, per_word.tolist(), strict=True)))
        allowed = None
        if documents is not None:
            chosen = next(r for r in rows if r[0] == (4 if same else 3))
            allowed = np.zeros(0, dtype=np.int64) if not chosen[3] else \
                offsets[np.searchsorted(ids, np.frombuffer(chosen[5], dtype=INT8))] + \
                np.frombuffer(chosen[6], dtype=INT4)
        where, tfs, lengths = unpack([(r[5], int(r[3]), int(f)) for r, f in zip(found, first.tolist(), strict=True)])
        word_of = np.repeat(term_of, counts)
        if visible is not None:  # only what the caller may read is counted: the rest is as removed, here
            seen = next(r for r in rows if r[0] == 4)
            n, total = int(seen[3]), int(seen[4])
            live = np.zeros(int(offsets[-1]), dtype=bool)
            if seen[3]:
                live[offsets[np.searchsorted(ids, np.frombuffer(seen[5], dtype=INT8))]
                     + np.frombuffer(seen[6], dtype=INT4)] = True
        if live is not None:
            keep = live[where]
            where, tfs, lengths, word_of = where[keep], tfs[keep], lengths[keep], word_of[keep]
        per_word = np.bincount(word_of, minlength=len(words))
        bounds = np.concatenate([[0], np.cumsum(per_word)]).tolist()
        postings = {}
        for i, word in enumerate(words):
            if per_word[i]:
                a, b = bounds[i], bounds[i + 1]
                postings[word] = (where[a:b], tfs[a:b], lengths[a:b])
                df[word] = b - a
        return _Read(n, total, int(offsets[-1]), ids, offsets, postings, df, allowed)

    def search(self, query: str, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Filtered, the same scores (N, df and the mean length over every live chunk), ranked over the allowed
        chunks only: the postings are scored whole and the other positions masked before the k best are chosen."""
        # A query too short to detect is taken to be English: the collection's languages are not stored here.
        words = [term_key(w) for w in self.analyzer.terms(query, fallback=DEFAULT)]
        if not words or k <= 0 or (allowed is not None and not len(allowed.documents)):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        documents = None if allowed is None else allowed.documents.tolist()
        visible = None if allowed is None or allowed.visible is None else allowed.visible.tolist()
        for _ in range(3):
            try:
                return self._search(words, k, documents, visible)
            except _Moved:
                continue
        raise RuntimeError("BM25 segments kept moving under a READ COMMITTED search: search in a transaction")

    def _search(self, words: list[str], k: int, documents: list[int] | None,
                visible: list[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        empty = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        with self._cursor(binary=True) as cur:  # bytea as it is, not as hex
            read = self._read(cur, words, full=True, documents=documents, visible=visible)
            if not read.n or not read.postings:
                return empty
            out = np.zeros(read.size, dtype=np.float64)
            avg = float(read.total / read.n)  # integers, so the same quotient as the embedded index's float sum / n
            k1, b, n = self.k1, self.b, read.n
            weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            for word in words:  # a repeated query word counts again, as in the reference
                if word not in read.postings:
                    continue
                if word not in weights:
                    where, tfs, lengths = read.postings[word]
                    df = len(where)
                    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                    f, length = tfs.astype(np.float64), lengths.astype(np.float64)
                    # citerag.index.bm25's expression, operation for operation: the same floating-point result.
                    weights[word] = (where.astype(np.intp),
                                     idf * (f * (k1 + 1)) / (f + k1 * (1 - b + (b * length) / avg)))
                rows, weight = weights[word]
                out[rows] += weight
            usable = out > 0
            if read.allowed is not None:  # filtered: only the allowed chunks compete for the k best
                allowed = np.zeros(read.size, dtype=bool)
                allowed[read.allowed] = True
                usable &= allowed
            scoring = np.flatnonzero(usable)
            if not len(scoring):
                return empty
            if len(scoring) > k:  # the k best and every tie of the k-th: the order among ties is by chunk id
                kth = np.partition(out[scoring], len(scoring) - k)[len(scoring) - k]
                scoring = scoring[out[scoring] >= kth]
            at = np.searchsorted(read.offsets, scoring, side="right") - 1
            found = cur.execute(_CHUNK_IDS, (read.segments[at].tolist(), (scoring - read.offsets[at]).tolist(),
                                             list(range(len(scoring))), self.collection_id, self.model)).fetchall()
        if len(found) != len(scoring):
            raise _Moved
        chunk_ids = np.zeros(len(scoring), dtype=np.int64)
        for i, data in found:
            chunk_ids[int(i)] = int.from_bytes(data, "big", signed=True)
        best = np.lexsort((chunk_ids, -out[scoring]))[:k]
        return chunk_ids[best], out[scoring][best]

    def query_mass(self, query: str, allowed: Allowed | None = None) -> float:
        terms = [term_key(w) for w in self.analyzer.terms(query, fallback=DEFAULT)]  # as `search` reads them
        if not terms:
            return 0.0
        visible = None if allowed is None or allowed.visible is None else allowed.visible.tolist()
        with self._cursor(binary=True) as cur:
            read = self._read(cur, terms, full=False, visible=visible)
        return idf_mass(read.n, read.df, terms)

    def save(self, directory: Path) -> dict[str, Any]:
        """Nothing to write: the rows are durable once the caller's transaction commits."""
        return {}


__all__ = ["INT4", "INT8", "REMOVED_FRACTION", "TIER_BASE", "TIER_FACTOR", "PgBm25Index", "lexical_key",
           "merge_plan", "postings_by_document", "term_key", "tier"]
