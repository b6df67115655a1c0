"""BM25 on PostgreSQL at 100,000 chunks: one query's latency with the postings as rows (schema version 4, one
(term, chunk) row each, as citerag searched them before) and as segment arrays (citerag.index.pg_bm25 now).

    .venv/bin/python benchmarks/bench_pg_bm25.py [--chunks 100000] [--rounds 5] [--data DIR]

Data: the strategy-E chunks of the dev set's 14 HTML chapters repeated up to --chunks, each copy with three words
replaced by corpus words and "(copy C, document D)" appended (fixed seed), added through PgBm25Index.add as
50-chunk documents, a transaction each (merges run as in ingestion), to an embedded PostgreSQL kept under --data
(delete it to load again); the rows layout is made from the same postings. Queries: the 80 dev questions, k = 10,
each in a REPEATABLE READ transaction as a store view searches; both layouts must give the same ids and scores
to the bit. Beside them, what a PostgreSQL user would otherwise write: the built-in full-text search over the same
texts (a `tsvector` column with a GIN index, `to_tsquery('english', w1 | w2 | ...)` of the question's words, the
ten best by `ts_rank`; OR, as BM25 scores any word, where `plainto_tsquery`'s AND would find nothing for most
questions; a different ranking, so only its time is compared). Printed: per layout, the median over the rounds of
each round's p50 and p95 (the CPUs are shared); --json also writes them to a file.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from pathlib import Path

import numpy as np
import psycopg

from citerag.app.files import extract_file
from citerag.chunk import chunk_extracted
from citerag.index.analyzer import REFERENCE
from citerag.index.pg_bm25 import INT4, INT8, PgBm25Index, term_key
from citerag.local_postgres import LocalPostgres
from citerag.store.base import ChunkBatch
from citerag.store.pg_migrate import migrate

DEV = Path(__file__).resolve().parents[1] / "eval" / "debian-reference"
WORD = re.compile(r"[A-Za-z][a-z]+")
COLLECTION, MODEL, PER_DOCUMENT = 1, "bench", 50


def texts(size: int) -> list[str]:
    base = [c.text for p in sorted((DEV / "corpus").glob("*.html")) for c in chunk_extracted(extract_file(p), "E", 512)]
    vocab = sorted({w.lower() for t in base for w in WORD.findall(t)})
    rng, out = np.random.default_rng(0), []
    for g in range(size):
        text = base[g % len(base)]
        spans = [m.span() for m in WORD.finditer(text)]
        parts, at = [], 0
        for i in sorted(rng.choice(len(spans), size=min(3, len(spans)), replace=False).tolist()):
            parts += [text[at:spans[i][0]], vocab[int(rng.integers(len(vocab)))]]
            at = spans[i][1]
        out.append("".join(parts) + text[at:] + f" (copy {g // len(base)}, document {g // PER_DOCUMENT})")
    return out


def load(conn: psycopg.Connection, size: int) -> None:
    """The segments, as ingestion writes them; then schema version 4's table (a row per term and chunk) of them."""
    migrate(conn)
    index, all_texts, started = PgBm25Index(conn, COLLECTION, MODEL), texts(size), time.perf_counter()
    for doc in range(size // PER_DOCUMENT):
        ids = np.arange(doc * PER_DOCUMENT, (doc + 1) * PER_DOCUMENT) + 1
        index.add(ChunkBatch(ids=ids, document_ids=np.full(len(ids), doc + 1), texts=all_texts[ids[0] - 1:ids[-1]],
                             vectors=np.zeros((len(ids), 0), dtype=np.float32)))
        conn.commit()
    print(f"segments: {size:,} chunks added in {time.perf_counter() - started:.1f} s", flush=True)
    ids = {s: np.frombuffer(b, dtype=INT8) for s, b in conn.cursor(binary=True).execute(
        "SELECT segment, chunk_ids FROM bm25_segments")}
    terms = conn.cursor(binary=True).execute("SELECT term, segment, postings, data FROM bm25_terms").fetchall()
    conn.execute("CREATE TABLE old_postings (collection_id INTEGER, term TEXT, chunk_id BIGINT, tf INTEGER,"
                 " PRIMARY KEY (collection_id, term, chunk_id) INCLUDE (tf))")
    with conn.cursor().copy("COPY old_postings FROM STDIN") as copy:
        for term, segment, count, data in terms:  # data: positions, tfs, lengths (int4 each)
            values = np.frombuffer(data, dtype=INT4)
            copy.write("".join(f"{COLLECTION}\t{term}\t{c}\t{f}\n" for c, f in zip(
                ids[segment][values[:count]].tolist(), values[count:2 * count].tolist(), strict=True)))
    conn.execute("CREATE TABLE fts (chunk_id BIGINT PRIMARY KEY, body TEXT, doc tsvector)")
    with conn.cursor().copy("COPY fts (chunk_id, body) FROM STDIN") as copy:
        for i, text in enumerate(all_texts, 1):
            copy.write_row((i, text.replace("\x00", "")))
    conn.execute("UPDATE fts SET doc = to_tsvector('english', body)")
    conn.execute("CREATE INDEX fts_doc ON fts USING gin (doc)")
    conn.commit()
    with psycopg.connect(conn.info.dsn, autocommit=True) as other:
        other.execute("VACUUM ANALYZE")


def fts_search(conn: psycopg.Connection, query: str, k: int) -> list[int]:
    """PostgreSQL's own full-text search, as a user without citerag would rank chunks by a question's words."""
    words = " | ".join(sorted(set(REFERENCE.terms(query))))
    return [row[0] for row in conn.execute(
        "SELECT chunk_id FROM fts, to_tsquery('english', %s) q WHERE doc @@ q ORDER BY ts_rank(doc, q) DESC LIMIT %s",
        (words or "''", k))]


def rows_search(conn: psycopg.Connection, query: str, k: int, k1: float = 1.2, b: float = 0.75):
    """Search before schema version 5: N, lengths and every posting of each word as rows (array_send'ed)."""
    words = [term_key(w) for w in REFERENCE.terms(query)]
    with conn.cursor(binary=True) as cur:
        n, total = cur.execute("SELECT count(*), COALESCE(sum(length), 0) FROM lexical_chunks"
                               " WHERE collection_id = %s AND model = %s", (COLLECTION, MODEL)).fetchone()
        found = cur.execute(
            "SELECT p.term, array_send(array_agg(p.chunk_id)), array_send(array_agg(p.tf)),"
            " array_send(array_agg(l.length)) FROM old_postings p JOIN lexical_chunks l"
            " ON l.collection_id = p.collection_id AND l.chunk_id = p.chunk_id"
            " WHERE p.collection_id = %s AND p.term = ANY(%s) AND l.model = %s GROUP BY p.term",
            (COLLECTION, sorted(set(words)), MODEL)).fetchall()
    postings = {row[0]: [np.frombuffer(data, dtype=[("n", ">i4"), ("v", f">i{size}")], offset=20)["v"]
                         for data, size in zip(row[1:], (8, 4, 4), strict=True)] for row in found}
    chunk_ids = np.unique(np.concatenate([p[0] for p in postings.values()]))
    out, avg, weights = np.zeros(len(chunk_ids)), float(total / n), {}
    for word in (w for w in words if w in postings):
        if word not in weights:
            ids, tfs, lengths = postings[word]
            idf = math.log(1 + (n - len(ids) + 0.5) / (len(ids) + 0.5))
            f, length = tfs.astype(np.float64), lengths.astype(np.float64)
            weights[word] = (np.searchsorted(chunk_ids, ids),
                             idf * (f * (k1 + 1)) / (f + k1 * (1 - b + (b * length) / avg)))
        out[weights[word][0]] += weights[word][1]
    scoring = np.flatnonzero(out > 0)
    best = scoring[np.lexsort((chunk_ids[scoring], -out[scoring]))][:k]
    return chunk_ids[best], out[best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, default in (("--chunks", 100_000), ("--rounds", 5)):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument("--data", type=Path, default=Path("/tmp/citerag-bench-pg-bm25"))
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    server = LocalPostgres(args.data / f"pg-{args.chunks}").start()
    try:
        conn = psycopg.connect(server.url("postgres"))
        if conn.execute("SELECT to_regclass('fts') IS NULL").fetchone()[0]:  # not loaded, or by an older version
            conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
            load(conn, args.chunks)
        conn.commit()
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        questions = [json.loads(line)["query"] for line in (DEV / "questions.jsonl").read_text().splitlines()]
        index = PgBm25Index(conn, COLLECTION, MODEL)
        layouts = {"rows (before)": lambda q: rows_search(conn, q, 10), "segments (now)": lambda q: index.search(q, 10),
                   "full-text ts_rank": lambda q: fts_search(conn, q, 10)}
        rounds: dict[str, list[np.ndarray]] = {name: [] for name in layouts}
        for r in range(args.rounds + 1):  # round 0 warms up and checks that both give the same answers
            took: dict[str, list[float]] = {name: [] for name in layouts}
            for q in questions:  # the layouts in turn, so that both meet the same load from other processes
                found = []
                for name, search in layouts.items():
                    started = time.perf_counter()
                    found.append(search(q))
                    took[name].append(1000 * (time.perf_counter() - started))
                    conn.rollback()
                (a, sa), (b, sb), _ = found
                assert a.tolist() == b.tolist() and sa.tolist() == sb.tolist(), q  # to the bit
            for name in layouts if r else ():
                rounds[name].append(np.percentile(took[name], [50, 95]))
        print(f"{len(index):,} chunks, {len(questions)} questions (k 10), median of {args.rounds} rounds' p50, p95 ms")
        figures = {"chunks": len(index), "questions": len(questions), "rounds": args.rounds}
        for name, values in rounds.items():
            p50, p95 = np.median(values, axis=0)
            figures[name] = {"p50_ms": round(float(p50), 2), "p95_ms": round(float(p95), 2)}
            print(f"  {name:18} p50 {p50:7.1f}   p95 {p95:7.1f}   (p50 of each round: "
                  f"{' '.join(f'{v[0]:.1f}' for v in values)})")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        conn.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
