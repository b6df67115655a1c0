"""Vector search inside PostgreSQL: pgvector over table chunk_vectors, in the caller's transaction.

The PostgreSQL store writes an index's rows in the same transaction as the chunks (`remove_documents` then
`add`), and searches in its read transaction, possibly on a streaming replica: so nothing here commits, and
search writes nothing (no DDL, no temporary table; `SET LOCAL` only). One table serves every collection and
embedding model; every statement names the collection and the model.

HNSW indexes are partial, one per dimension (`embedding::vector(N) ... WHERE dim = N`), made when a dimension is
first written. The planner uses a partial index only where it can prove the predicate, so `dim = N` and the cast
are literals in the SQL text, never bind parameters. Collection and model are filtered while the graph is walked
(pgvector's iterative scan), so one small collection among large ones still gets k answers; where the scan gives
up (hnsw.max_scan_tuples) or the collection holds fewer rows than asked, the exact scan answers instead. A
filtered search (`Allowed`) adds its documents to the same WHERE clause: over at most EXACT_FILTERED_ROWS chunks
(the embedded HNSW index's threshold) the exact scan answers, reading only those documents' rows (index
chunk_vectors_by_document); above it the walk filters them as it does the collection.

Similarities returned are the exact inner product (cosine: the vectors are unit length) computed by PostgreSQL,
by either path, so a chunk has the same similarity whichever path found it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import Connection, Cursor
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow, tuple_row

from citerag.index import hnsw
from citerag.index.base import Allowed
from citerag.store.base import ChunkBatch

# Measured on the scale benchmark's 100k vectors (near-copies of the 1,343 dev-set chunk vectors, so a query's
# 10th and 11th neighbours are very close; benchmarks/bench_scale.py), queries the 80 dev questions, recall@10
# against the exact scan (66 ms a query there), graphs built with maintenance_work_mem 1GB: M 16 /
# ef_construction 128: ef_search 100 0.891, 200 0.945, 400 0.948 (built in 24 s); ef_construction 256: 100
# 0.960, 200 0.988 (2.3 ms p50, 3.3 ms p95), 400 0.988 (built in 41 s; 1.6 ms a row inserted later); M 24 /
# 200: 200 0.988, 400 1.000 (4.4 ms p50). On the dev set itself (1,343 vectors beside as many near-copies in
# another collection, the walk forced): 0.991 at ef_search 40, 0.995 at 64, 1.0 from 100
# (tests/index/test_pg_hnsw_recall.py). The planner walks the graph only where it expects that to beat scoring
# the collection's rows: at ef_search 200, from about 8,000 rows of 384 dimensions.
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 256
VECTOR_MAX_DIM = 16_000
HNSW_MAX_DIM = 2000  # pgvector's HNSW limit for `vector`; above it search is exact (a sequential scan)
EF_SEARCH = 200  # the search breadth: at least this, and never below the rows fetched
MAX_EF_SEARCH = 1000  # pgvector's limit
FETCH_MARGIN = 10  # rows fetched past k: the graph's order is approximate, and ties at the k-th need settling
_LOCK_KEY = 0x63697465726167 + 1  # after pg_migrate's: held by the one transaction creating an HNSW index


def index_name(dim: int) -> str:
    return f"chunk_vectors_hnsw_{int(dim)}"


def vector_literal(vector: np.ndarray) -> str:
    """pgvector's text form. Each float32 is written as the shortest decimal that reads back as that float32."""
    return "[" + ",".join(repr(float(x)) for x in vector.tolist()) + "]"


def search_settings(fetch: int) -> list[str]:
    """The SET LOCALs of an approximate search fetching this many rows (they last until the transaction ends)."""
    return [f"SET LOCAL hnsw.ef_search = {min(max(EF_SEARCH, fetch), MAX_EF_SEARCH)}",
            # Filter while walking: else the graph's ef_search nearest may all be other collections' rows.
            "SET LOCAL hnsw.iterative_scan = relaxed_order"]


def _documents(filtered: bool) -> str:
    return " AND document_id = ANY(%s::bigint[])" if filtered else ""


def approximate_sql(dim: int, limit: int, filtered: bool = False) -> str:
    """The graph's nearest rows; parameters (query, collection id, model, [document ids,] query), the document
    ids when `filtered`. Dimension and limit are literals: the partial index's predicate must be provable, and a
    generic plan must still see a LIMIT."""
    return (f"SELECT chunk_id, (embedding <#> %s::vector) * -1 FROM chunk_vectors "
            f"WHERE collection_id = %s AND model = %s AND dim = {int(dim)}{_documents(filtered)} "
            f"ORDER BY embedding::vector({int(dim)}) <=> %s::vector LIMIT {int(limit)}")


def exact_sql(dim: int, limit: int, filtered: bool = False) -> str:
    """Every row of the collection and model (of the documents, when `filtered`) scored, on the uncast column
    that no index covers; parameters (query, collection id, model[, document ids])."""
    return (f"SELECT chunk_id, (embedding <#> %s::vector) * -1 AS sim FROM chunk_vectors "
            f"WHERE collection_id = %s AND model = %s AND dim = {int(dim)}{_documents(filtered)} "
            f"ORDER BY sim DESC, chunk_id LIMIT {int(limit)}")


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)


def _best(rows: list[tuple[int, float]], k: int) -> tuple[np.ndarray, np.ndarray]:
    if not rows:
        return _empty()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    sims = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
    order = np.lexsort((ids, -sims))[:k]
    return ids[order], sims[order]


class PgVectorIndex:
    """The VectorIndex of one (collection, embedding model) in table chunk_vectors, on the caller's connection.

    `approximate`: search walks the dimension's HNSW graph; otherwise every row of the collection and model is
    scored (the reference the graph is measured by).
    """

    kind = "pgvector"

    def __init__(self, conn: Connection[Any], collection_id: int, model: str, *, approximate: bool = True) -> None:
        self.conn = conn
        self.collection_id = int(collection_id)
        self.model = model
        self.approximate = approximate
        self._dim = 0

    @property
    def dim(self) -> int:
        """The dimension of this model's rows; 0 while there are none (and nothing was added)."""
        if not self._dim:
            with self._cursor() as cur:
                row = cur.execute("SELECT dim FROM chunk_vectors WHERE collection_id = %s AND model = %s LIMIT 1",
                                  (self.collection_id, self.model)).fetchone()
            self._dim = int(row[0]) if row else 0
        return self._dim

    @dim.setter
    def dim(self, value: int) -> None:
        self._dim = int(value)

    @contextmanager
    def _cursor(self) -> Iterator[Cursor[TupleRow]]:
        # Its own row factory: the caller's connection may return dicts.
        with self.conn.cursor(row_factory=tuple_row) as cur:
            yield cur

    def _read_transaction(self) -> Any:
        """SET LOCAL needs a transaction: on an autocommit connection outside one, open one for the search."""
        if self.conn.autocommit and self.conn.info.transaction_status == TransactionStatus.IDLE:
            return self.conn.transaction()
        return nullcontext()

    def __len__(self) -> int:
        with self._cursor() as cur:
            row = cur.execute("SELECT count(*) FROM chunk_vectors WHERE collection_id = %s AND model = %s",
                              (self.collection_id, self.model)).fetchone()
        return int(row[0]) if row else 0

    def add(self, batch: ChunkBatch) -> None:
        """Insert the batch's vectors (binary COPY); its chunk ids must not be in the collection already."""
        if not len(batch):
            return
        vectors = np.asarray(batch.vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(batch):
            raise ValueError(f"{len(batch)} chunks but vectors of shape {vectors.shape}")
        dim = int(vectors.shape[1])
        if self.dim and dim != self.dim:
            raise ValueError(f"vectors of dimension {dim} in an index of dimension {self.dim}")
        # What pgvector would refuse, refused before the SQL: a failed statement aborts the caller's transaction.
        if not 0 < dim <= VECTOR_MAX_DIM:
            raise ValueError(f"vectors of dimension {dim}: pgvector stores 1 to {VECTOR_MAX_DIM}")
        if not np.all(np.isfinite(vectors)):
            raise ValueError("vectors with NaN or infinite values")
        # pgvector's binary form (uint16 dim, uint16 unused, big-endian float4s), sent as the field's raw bytes:
        # a binary COPY hands each field to the column type's receive function, whatever the client calls it.
        head = np.array([dim, 0], dtype=">u2").tobytes()
        big = vectors.astype(">f4")
        ids = np.asarray(batch.ids, dtype=np.int64).tolist()
        documents = np.asarray(batch.document_ids, dtype=np.int64).tolist()
        with self._cursor() as cur:
            with cur.copy("COPY chunk_vectors (collection_id, chunk_id, document_id, model, dim, embedding) "
                          "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "int8", "int8", "text", "int4", "bytea"])
                for i, (cid, doc) in enumerate(zip(ids, documents, strict=True)):
                    copy.write_row((self.collection_id, cid, doc, self.model, dim, head + big[i].tobytes()))
            # After the rows: when this creates the index, it is built from them in one pass.
            self._ensure_hnsw(cur, dim)
        self._dim = dim

    @staticmethod
    def _ensure_hnsw(cur: Cursor[TupleRow], dim: int) -> None:
        """The partial HNSW index of this dimension, made in the caller's transaction if missing."""
        if dim > HNSW_MAX_DIM:
            return
        name = index_name(dim)
        # The common path: the index exists, no lock taken. to_regclass reads the latest committed catalog.
        if cur.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone() == (True,):
            return
        # One writer creates; one that finds the lock taken goes on without (its rows join the index when that
        # one is built, or later writes make it). Waiting instead would deadlock: CREATE INDEX waits for every
        # transaction that has written chunk_vectors (the store removes a document's rows before adding), and
        # such a transaction would be waiting for this lock. IF NOT EXISTS: a creator that committed meanwhile.
        if cur.execute("SELECT pg_try_advisory_xact_lock(%s)", (_LOCK_KEY,)).fetchone() != (True,):
            return
        cur.execute(f"CREATE INDEX IF NOT EXISTS {name} ON chunk_vectors USING hnsw "
                    f"((embedding::vector({dim})) vector_cosine_ops) "
                    f"WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE dim = {dim}")

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        """Delete these documents' vectors, of every model: a document's chunk ids are replaced whole."""
        docs = [int(d) for d in document_ids]
        if not docs:
            return
        with self._cursor() as cur:
            cur.execute("DELETE FROM chunk_vectors WHERE collection_id = %s AND document_id = ANY(%s)",
                        (self.collection_id, docs))

    def _query(self, query: np.ndarray) -> str | None:
        """The query as a vector literal; None when the index is empty. A wrong dimension raises here, before a
        statement could fail and abort the caller's transaction."""
        dim = self.dim
        if not dim:
            return None
        q = np.asarray(query, dtype=np.float32).reshape(-1)
        if len(q) != dim:
            raise ValueError(f"a query of dimension {len(q)} for an index of dimension {dim}")
        if not np.all(np.isfinite(q)):
            raise ValueError("a query vector with NaN or infinite values")
        return vector_literal(q)

    def search(self, query: np.ndarray, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        q = self._query(query)
        if q is None or k <= 0 or (allowed is not None and not len(allowed.documents)):
            return _empty()
        documents = None if allowed is None else allowed.documents.tolist()
        # A filter keeping few chunks is scored exactly: a walk would visit mostly other documents' rows.
        walk = allowed is None or allowed.chunks > hnsw.EXACT_FILTERED_ROWS
        with self._read_transaction(), self._cursor() as cur:
            if walk and self.approximate and self.dim <= HNSW_MAX_DIM:
                found = self._approximate(cur, q, k, documents)
                if found is not None:
                    return found
            return self._exact(cur, q, k, documents)

    def _approximate(self, cur: Cursor[TupleRow], q: str, k: int,
                     documents: list[int] | None) -> tuple[np.ndarray, np.ndarray] | None:
        """The graph's answer, or None where it found fewer rows than fetched (a small collection or filter, or a
        scan that gave up): then the exact scan answers."""
        fetch = k + FETCH_MARGIN
        filtered = documents is not None
        while fetch <= MAX_EF_SEARCH:
            for statement in search_settings(fetch):
                cur.execute(statement)
            params = (q, self.collection_id, self.model, *([documents] if filtered else []), q)
            # Filtered, never prepared: a generic plan cannot see how many rows the document list keeps (it guesses
            # a few hundred) and scores every one of them through chunk_vectors_by_document, 10 times the walk's
            # time at 50,000 of 100,000 rows (benchmarks/bench_filtered.py); a custom plan chooses by the list.
            rows = cur.execute(approximate_sql(self.dim, fetch, filtered), params,
                               prepare=False if filtered else None).fetchall()
            if len(rows) < fetch:
                return None
            ids, sims = _best(rows, len(rows))
            # Rows tied with the k-th may lie past the fetch (identical vectors): fetch more, so that the
            # tie-break by chunk id is over all of them.
            if sims[-1] < sims[k - 1]:
                return ids[:k], sims[:k]
            fetch *= 2
        return None

    def _exact(self, cur: Cursor[TupleRow], q: str, k: int,
               documents: list[int] | None) -> tuple[np.ndarray, np.ndarray]:
        filtered = documents is not None
        params = (q, self.collection_id, self.model, *([documents] if filtered else []))
        return _best(cur.execute(exact_sql(self.dim, k, filtered), params).fetchall(), k)

    def similarity(self, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
        wanted = np.asarray(ids, dtype=np.int64).reshape(-1)
        q = self._query(query)
        found: dict[int, float] = {}
        if q is not None and len(wanted):
            with self._cursor() as cur:
                rows = cur.execute("SELECT chunk_id, (embedding <#> %s::vector) * -1 FROM chunk_vectors "
                                   "WHERE collection_id = %s AND model = %s AND chunk_id = ANY(%s)",
                                   (q, self.collection_id, self.model, wanted.tolist())).fetchall()
            found = {int(r[0]): float(r[1]) for r in rows}
        missing = [i for i in wanted.tolist() if i not in found]
        if missing:
            raise KeyError(f"chunk ids not in the index: {missing[:5]}")
        return np.array([found[i] for i in wanted.tolist()], dtype=np.float64)

    def save(self, directory: Path) -> dict[str, Any]:
        """Nothing to write: the rows are durable once the caller's transaction commits."""
        return {}
