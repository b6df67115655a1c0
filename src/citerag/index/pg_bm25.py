"""BM25 inside PostgreSQL over tables lexical_chunks and postings, in the caller's transaction, scoring exactly as
the reference formula (citerag.search.bm25).

As in the embedded index (citerag.index.bm25), nothing derived from the collection as a whole is stored: each
query computes N, the document frequencies and the mean length over the live rows of its collection and model, so
a score after any sequence of updates equals a fresh build's. The database finds the postings of the query's
words (with each chunk's length, one array per word) and the collection's count and total length; the arithmetic
is the embedded index's own numpy code, in the same order, so scores are the same to the last bit. Doing it in
SQL instead (float8, ordered sums) gave the same bits but took twice as long: PostgreSQL's executor handles the
few hundred thousand postings of a stop-word query row by row, numpy as arrays. PostgreSQL's text search
(ts_rank) weighs differently and is not used.

The tokenisation (citerag.index.analyzer) is part of the rows' key: lexical_chunks.model holds the embedding
model for the reference's tokens and "MODEL|stemmed" for stemmed ones (`lexical_key`), so postings of one
tokenisation are never scored with another's query terms; DatabaseSearch refuses a search whose tokenisation
the collection has no rows for.

Nothing here commits, and search writes nothing: the store writes in its transaction and reads in its own.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from psycopg import Connection, Cursor
from psycopg.rows import TupleRow, tuple_row

from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import idf_mass
from citerag.lang import DEFAULT
from citerag.store.base import ChunkBatch

_LIVE = "SELECT count(*), COALESCE(sum(length), 0) FROM lexical_chunks WHERE collection_id = %s AND model = %s"
# One row per query word found: its postings' chunk ids, term frequencies and chunk lengths, row for row, as
# array_send's binary form (parsed by numpy, where psycopg would make a Python int of every element).
_POSTINGS = """
SELECT p.term, array_send(array_agg(p.chunk_id)), array_send(array_agg(p.tf)), array_send(array_agg(l.length))
FROM postings p JOIN lexical_chunks l ON l.collection_id = p.collection_id AND l.chunk_id = p.chunk_id
WHERE p.collection_id = %s AND p.term = ANY(%s) AND l.model = %s
GROUP BY p.term
"""
# Document frequency of each query word found (the live chunks of this model that hold it).
_DF = """
SELECT p.term, count(*)
FROM postings p JOIN lexical_chunks l ON l.collection_id = p.collection_id AND l.chunk_id = p.chunk_id
WHERE p.collection_id = %s AND p.term = ANY(%s) AND l.model = %s
GROUP BY p.term
"""


def int_array(data: bytes, size: int) -> np.ndarray:
    """An int4 (size 4) or int8 (size 8) array from array_send's form: a header (one dimension, no NULLs: 20
    bytes), then each element as its length and its big-endian value."""
    if int.from_bytes(data[0:4], "big") != 1 or int.from_bytes(data[4:8], "big") != 0:
        raise ValueError("expected a one-dimensional array without NULLs")
    count = int.from_bytes(data[12:16], "big")
    elements = np.frombuffer(data, dtype=[("length", ">i4"), ("value", f">i{size}")], count=count, offset=20)
    return elements["value"].astype(np.int64)


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


class PgBm25Index:
    """The LexicalIndex of one (collection, embedding model): the chunks' lengths in reference tokens, and their
    postings (term, chunk, term frequency)."""

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

    def __len__(self) -> int:
        with self._cursor() as cur:
            row = cur.execute("SELECT count(*) FROM lexical_chunks WHERE collection_id = %s AND model = %s",
                              (self.collection_id, self.model)).fetchone()
        return int(row[0]) if row else 0

    def add(self, batch: ChunkBatch) -> None:
        """Tokenise the batch's texts and insert their lengths and postings (binary COPY); its chunk ids must not
        be in the collection already."""
        if not len(batch):
            return
        ids = np.asarray(batch.ids, dtype=np.int64).tolist()
        documents = np.asarray(batch.document_ids, dtype=np.int64).tolist()
        counts = [Counter(map(term_key, self.analyzer.terms(text))) for text in batch.texts]
        with self._cursor() as cur:
            with cur.copy("COPY lexical_chunks (collection_id, chunk_id, document_id, model, length) "
                          "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "int8", "int8", "text", "int4"])
                for cid, doc, words in zip(ids, documents, counts, strict=True):
                    copy.write_row((self.collection_id, cid, doc, self.model, sum(words.values())))
            with cur.copy("COPY postings (collection_id, term, chunk_id, tf) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "text", "int8", "int4"])
                for cid, words in zip(ids, counts, strict=True):
                    for term, tf in words.items():
                        copy.write_row((self.collection_id, term, cid, tf))

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        """Delete these documents' chunks and postings, of every model: a document's chunk ids are replaced whole."""
        docs = [int(d) for d in document_ids]
        if not docs:
            return
        with self._cursor() as cur:
            cur.execute("DELETE FROM postings p USING lexical_chunks l "
                        "WHERE l.collection_id = %(c)s AND l.document_id = ANY(%(docs)s) "
                        "AND p.collection_id = %(c)s AND p.chunk_id = l.chunk_id",
                        {"c": self.collection_id, "docs": docs})
            cur.execute("DELETE FROM lexical_chunks WHERE collection_id = %s AND document_id = ANY(%s)",
                        (self.collection_id, docs))

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        empty = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        # A query too short to detect is taken to be English: the collection's languages are not stored here.
        words = [term_key(w) for w in self.analyzer.terms(query, fallback=DEFAULT)]
        if not words or k <= 0:
            return empty
        with self._cursor(binary=True) as cur:  # bytea as it is, not as hex
            live = cur.execute(_LIVE, (self.collection_id, self.model)).fetchone()
            n, total = (int(live[0]), int(live[1])) if live else (0, 0)
            if not n:
                return empty
            found = cur.execute(_POSTINGS, (self.collection_id, sorted(set(words)), self.model)).fetchall()
        if not found:
            return empty
        postings = {term: (int_array(ids, 8), int_array(tfs, 4), int_array(lengths, 4))
                    for term, ids, tfs, lengths in found}
        chunk_ids = np.unique(np.concatenate([p[0] for p in postings.values()]))  # the rows that can score
        out = np.zeros(len(chunk_ids), dtype=np.float64)
        avg = float(total / n)  # integers, so the same quotient as the embedded index's float sum / n
        k1, b = self.k1, self.b
        weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for word in words:  # a repeated query word counts again, as in the reference
            if word not in postings:
                continue
            if word not in weights:
                ids, tfs, lengths = postings[word]
                df = len(ids)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                f, length = tfs.astype(np.float64), lengths.astype(np.float64)
                # citerag.index.bm25's expression, operation for operation: the same floating-point result.
                weights[word] = (np.searchsorted(chunk_ids, ids),
                                 idf * (f * (k1 + 1)) / (f + k1 * (1 - b + (b * length) / avg)))
            rows, weight = weights[word]
            out[rows] += weight
        scoring = np.flatnonzero(out > 0)
        best = scoring[np.lexsort((chunk_ids[scoring], -out[scoring]))][:k]
        return chunk_ids[best], out[best]

    def query_mass(self, query: str) -> float:
        terms = [term_key(w) for w in self.analyzer.terms(query, fallback=DEFAULT)]  # as `search` reads them
        if not terms:
            return 0.0
        with self._cursor() as cur:
            live = cur.execute(_LIVE, (self.collection_id, self.model)).fetchone()
            n = int(live[0]) if live else 0
            df = {str(t): int(c) for t, c in cur.execute(_DF, (self.collection_id, sorted(set(terms)),
                                                                 self.model)).fetchall()} if n else {}
        return idf_mass(n, df, terms)

    def save(self, directory: Path) -> dict[str, Any]:
        """Nothing to write: the rows are durable once the caller's transaction commits."""
        return {}
