"""The segment layout of PostgreSQL BM25 (citerag.index.pg_bm25): the binary form of a term's postings, the
tiers segments are merged in, the merge itself, and a consistency check of the postings. Split from pg_bm25 so
that the query side reads on its own; the format is the one its module docstring describes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np
from psycopg import Connection, Cursor, errors
from psycopg.rows import TupleRow, tuple_row

INT4, INT8 = np.dtype(">i4"), np.dtype(">i8")  # the stored arrays: int4send's and int8send's bytes
# COPY's binary format: a row's field count, a field's length, and the segment, count and data length fields
_INT2, _INT4, _SEGMENT_COUNT = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">iqiii")
_COPY_SIGNATURE, _COPY_TRAILER = b"PGCOPY\n\xff\r\n\0" + bytes(8), b"\xff\xff"  # COPY's binary format

# Merges (see merge_plan): a segment of live size s is in tier 0 below TIER_BASE chunks, else in tier
# 1 + floor(log_TIER_FACTOR(s / TIER_BASE)); TIER_FACTOR segments of one tier become one of the next, so a chunk
# is rewritten about log8(N / TIER_BASE) times (4 at 100,000 chunks) and a word has at most TIER_FACTOR - 1 rows
# per tier. Measured on 20,000 chunks added 50 at a time: a factor of 4 made adding twice as slow as the rows
# layout, 8 about 1.2 times; at 100,000 chunks 12 segments made queries no slower than one.
TIER_BASE, TIER_FACTOR = 64, 8
REMOVED_FRACTION = 0.25  # a segment whose removed chunks are at least this share of it is rewritten without them
MERGES_PER_ADD = 8

_SEGMENTS = """
SELECT s.segment, s.chunks, COALESCE(r.removed, 0)
FROM bm25_segments s LEFT JOIN (
    SELECT segment, count(*) AS removed FROM bm25_removed WHERE collection_id = %(c)s AND model = %(m)s
    GROUP BY segment) r ON r.segment = s.segment
WHERE s.collection_id = %(c)s AND s.model = %(m)s ORDER BY s.segment
"""


def tier(live: int) -> int:
    t, size = 0, TIER_BASE
    while live >= size:
        t, size = t + 1, size * TIER_FACTOR
    return t


def merge_plan(segments: Sequence[tuple[int, int, int]]) -> list[int]:
    """The segments to merge into one next, or none: `segments` are (id, positions, removed) oldest first. First
    a segment with at least REMOVED_FRACTION of it removed (rewritten alone), else the lowest tier holding
    TIER_FACTOR segments or more (all of that tier)."""
    for segment, chunks, removed in segments:
        if removed and removed >= REMOVED_FRACTION * chunks:
            return [segment]
    tiers: dict[int, list[int]] = {}
    for segment, chunks, removed in segments:
        tiers.setdefault(tier(chunks - removed), []).append(segment)
    full = [t for t, members in tiers.items() if len(members) >= TIER_FACTOR]
    return tiers[min(full)] if full else []


def unpack(rows: Sequence[tuple[bytes, int, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows' (data, count, first) as three arrays, row after row: data holds `count` positions, then as many tfs,
    then as many lengths (int4 each); `first` is added to the positions."""
    if not rows:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=INT4), np.zeros(0, dtype=INT4)
    parts = [(np.frombuffer(data, dtype=INT4), count, first) for data, count, first in rows]
    return (np.concatenate([first + values[:count].astype(np.int64) for values, count, first in parts]),
            np.concatenate([values[count:2 * count] for values, count, _ in parts]),
            np.concatenate([values[2 * count:] for values, count, _ in parts]))


def write_terms(cur: Cursor[TupleRow], collection_id: int, model_key: str, segment: int, terms: Sequence[str],
                bounds: np.ndarray, positions: np.ndarray, tfs: np.ndarray, lengths: np.ndarray) -> None:
    """One bm25_terms row per term: terms[i]'s postings are positions[bounds[i]:bounds[i + 1]] (and the same
    slices of tfs and lengths). Written as COPY's binary format directly: a merge writes many rows."""
    arrays = [memoryview(a.astype(INT4).tobytes()) for a in (positions, tfs, lengths)]
    model = model_key.encode("utf-8")
    head = _INT2.pack(6) + _INT4.pack(4) + _INT4.pack(collection_id) + _INT4.pack(len(model)) + model
    out = bytearray(_COPY_SIGNATURE)
    with cur.copy("COPY bm25_terms (collection_id, model, term, segment, postings, data)"
                  " FROM STDIN (FORMAT BINARY)") as copy:
        for term, start, end in zip(terms, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            word = term.encode("utf-8")
            out += head
            out += _INT4.pack(len(word))
            out += word
            out += _SEGMENT_COUNT.pack(8, segment, 4, end - start, 12 * (end - start))
            for array in arrays:
                out += array[4 * start:4 * end]
            if len(out) > 1 << 20:
                copy.write(out)
                out = bytearray()
        out += _COPY_TRAILER
        copy.write(out)


def merge(conn: Connection[Any], cur: Cursor[TupleRow], collection_id: int, model_key: str) -> None:
    """Carry out merge_plan until it has nothing to do (or a merge meets another transaction's lock)."""
    key = {"c": collection_id, "m": model_key}
    for _ in range(MERGES_PER_ADD):
        plan = merge_plan([(int(s), int(n), int(r)) for s, n, r in cur.execute(_SEGMENTS, key).fetchall()])
        if not plan:
            return
        try:
            with conn.transaction():  # a savepoint: a merge that meets a lock is undone whole
                if not merge_segments(conn, cur, collection_id, model_key, sorted(plan)):
                    return
        except errors.LockNotAvailable:
            return

def merge_segments(conn: Connection[Any], cur: Cursor[TupleRow], collection_id: int, model_key: str,
                   plan: list[int]) -> bool:
    """Rewrite the segments `plan` (ascending) as one of their live chunks, in order; False when another
    transaction holds one of them (LockNotAvailable when it holds one of their chunks)."""
    c, m = collection_id, model_key
    with conn.cursor(row_factory=tuple_row, binary=True) as reader:
        claimed = {int(s): bytes(ids) for s, ids in reader.execute(
            "SELECT segment, chunk_ids FROM bm25_segments WHERE collection_id = %s AND model = %s"
            " AND segment = ANY(%s) FOR UPDATE SKIP LOCKED", (c, m, plan)).fetchall()}
    if len(claimed) != len(plan):
        return False  # another merge has some of them, or merged them already
    old_ids = np.concatenate([np.frombuffer(claimed[s], dtype=INT8) for s in plan]).astype(np.int64)
    starts = np.cumsum([0, *(len(claimed[s]) // 8 for s in plan)])
    # The live chunks, locked: none can be removed until this commits, and a removal that waits for it
    # finds the chunk at its new place. One that removed a chunk before this began has committed (its
    # removed row is deleted below) or holds the row (NOWAIT raises).
    live = cur.execute("SELECT chunk_id, length FROM lexical_chunks WHERE collection_id = %s"
                       " AND chunk_id = ANY(%s) FOR UPDATE NOWAIT", (c, old_ids.tolist())).fetchall()
    found = np.zeros(len(old_ids), dtype=bool)
    length_of = np.zeros(len(old_ids), dtype=np.int64)
    if live:
        order = np.argsort(old_ids)
        at = order[np.searchsorted(old_ids[order], np.array([r[0] for r in live], dtype=np.int64))]
        found[at] = True
        length_of[at] = [r[1] for r in live]
    remap = np.cumsum(found) - 1  # old dense position (segments in plan order) -> new position
    remap[~found] = -1
    with conn.cursor(row_factory=tuple_row, binary=True) as reader:
        rows = reader.execute("SELECT term, segment, postings, data FROM bm25_terms"
                              " WHERE collection_id = %s AND model = %s AND segment = ANY(%s)"
                              " ORDER BY term, segment", (c, m, plan)).fetchall()
    for table in ("bm25_terms", "bm25_removed", "bm25_segments"):
        cur.execute(f"DELETE FROM {table} WHERE collection_id = %s AND model = %s AND segment = ANY(%s)",
                    (c, m, plan))
    if not found.any():
        return True
    row = cur.execute("SELECT nextval('bm25_segment_ids')").fetchone()
    assert row is not None
    segment = int(row[0])
    ids, lengths = old_ids[found], length_of[found]
    cur.execute("INSERT INTO bm25_segments (collection_id, model, segment, chunks, length, chunk_ids)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                (c, m, segment, len(ids), int(lengths.sum()), ids.astype(INT8).tobytes()))
    # Every row's postings at once: rows come by term, then segment, so each term's new positions ascend.
    counts = np.array([r[2] for r in rows], dtype=np.int64)
    firsts = starts[np.searchsorted(plan, [int(r[1]) for r in rows])].tolist()
    where, tfs, lens = unpack([(r[3], int(r[2]), f) for r, f in zip(rows, firsts, strict=True)])
    new = remap[where]
    keep = new >= 0
    tfs, lens = tfs[keep], lens[keep]
    terms = [str(r[0]) for r in rows]
    first_of_term = np.array([i == 0 or terms[i] != terms[i - 1] for i in range(len(rows))], dtype=bool)
    distinct = [t for t, is_first in zip(terms, first_of_term.tolist(), strict=True) if is_first]
    per_term = np.bincount(np.repeat(np.cumsum(first_of_term) - 1, counts)[keep], minlength=len(distinct))
    used = per_term > 0  # a term held only by removed chunks has no row any more
    write_terms(cur, c, m, segment, [t for t, u in zip(distinct, used.tolist(), strict=True) if u],
                      np.cumsum([0, *per_term[used]]), new[keep], tfs, lens)
    cur.execute("UPDATE lexical_chunks l SET segment = %s, position = w.position"
                " FROM unnest(%s::bigint[], %s::int4[]) AS w(chunk_id, position)"
                " WHERE l.collection_id = %s AND l.chunk_id = w.chunk_id",
                (segment, ids.tolist(), list(range(len(ids))), c))
    return True


def postings_by_document(conn: Connection[Any], collection_id: int) -> dict[int, int]:
    """Live postings (term, chunk) per document over every model of a collection, for consistency checks; -1:
    postings at a position that is neither a live chunk nor a removed one (there should be none). Read in one
    snapshot: the caller's transaction, or on an autocommit connection a REPEATABLE READ one of its own."""
    with conn.transaction() if conn.autocommit else nullcontext(), \
            conn.cursor(row_factory=tuple_row, binary=True) as cur:
        if conn.autocommit:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        owner = {(str(m), int(s), int(p)): int(d) for m, s, p, d in cur.execute(
            "SELECT model, segment, position, document_id FROM lexical_chunks WHERE collection_id = %s",
            (collection_id,))}
        removed = {(str(m), int(s), int(p)) for m, s, p in cur.execute(
            "SELECT model, segment, position FROM bm25_removed WHERE collection_id = %s", (collection_id,))}
        out: dict[int, int] = {}
        for model, segment, count, data in cur.execute(
                "SELECT model, segment, postings, data FROM bm25_terms WHERE collection_id = %s", (collection_id,)):
            for p in np.frombuffer(data, dtype=INT4)[:count].tolist():
                key = (str(model), int(segment), p)
                if key not in removed:
                    doc = owner.get(key, -1)
                    out[doc] = out.get(doc, 0) + 1
    return out
