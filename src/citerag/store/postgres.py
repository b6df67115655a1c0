"""The shared backend: PostgreSQL with pgvector, selected by `store_url = postgresql://...`.

One database holds many collections; each store object is one collection (a row of `collections`) and every statement
names its `collection_id`. A document's rows (document, chunks, vectors, postings, change-log entry, generation)
change in one transaction, so a reader, on the primary or on a streaming replica that replays the WAL commit by
commit, sees a document whole or not at all. The search indexes live in the same database: the store writes their
rows inside its own transaction, through the `search_rows` it is given (citerag.backends.postgres wires pgvector's
and BM25's, citerag.index.pgvector and citerag.index.pg_bm25), and a search reads them inside one REPEATABLE READ
transaction (`view()`), from `read_url` (a replica) when one is set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

import numpy as np

from citerag.errors import CiteragError, StoreUnavailable, Superseded, first_line
from citerag.settings import redact_url
from citerag.store import conversations, experiments, labels, sources
from citerag.store.base import ChunkBatch, ChunkStats, Snapshot, checked_vectors
from citerag.store.pg_migrate import ensure_current
from citerag.store.postgres_reads import DOC_COLUMNS, PostgresView, document
from citerag.types import Chunk, ConversationInfo, Document, Experiment, Label, Locator, SourceInfo, SourceItem, Turn

try:
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg_pool import ConnectionPool
except ImportError as exc:  # the [postgres] extra is optional
    raise CiteragError("the PostgreSQL backend needs its extra: pip install 'citerag[postgres]'") from exc

POOL_SIZE = 8  # connections per pool and process: an API process answers from a thread pool
CONNECT_TIMEOUT_S = 10

# Failures of the environment rather than of a document: no server, no connection, disk full, too many
# connections, a server shutting down, a read-only (replica) server. SQLSTATE classes 08, 53, 57P and 25006.
_ENVIRONMENT = (psycopg.OperationalError, pg_errors.ReadOnlySqlTransaction)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _configure(conn: psycopg.Connection[Any]) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)


def _configure_reader(conn: psycopg.Connection[Any]) -> None:
    _configure(conn)
    # Every statement of a view sees one snapshot; read only, so it runs on a hot standby too.
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    conn.read_only = True


PH = "%s"


class SearchRows(Protocol):
    """One search index's rows of a collection and an embedding model, written in the caller's transaction."""

    def add(self, batch: ChunkBatch) -> None: ...

    def remove_documents(self, document_ids: Iterable[int]) -> None: ...


# The search indexes' rows of (the transaction's connection, collection id, embedding model): what the store
# writes beside a document's chunks, in the same transaction (citerag.backends.postgres wires them).
SearchRowsOf = Callable[[psycopg.Connection[Any], int, str], Sequence[SearchRows]]


class PostgresStore:
    """One collection in a PostgreSQL database (see the module docstring)."""

    def __init__(self, url: str, collection: str = "default", create: bool = False, read_url: str = "", *,
                 search_rows: SearchRowsOf) -> None:
        self.url = url
        self.collection = collection
        self._search_rows = search_rows
        self._where = redact_url(url)
        self._closed = False
        try:
            with psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True) as conn:
                ensure_current(conn, self._where)
                self.collection_id = self._collection_id(conn, create)
        except _ENVIRONMENT as exc:
            raise StoreUnavailable(f"cannot open the store at {self._where}: {first_line(exc)}") from exc
        # Autocommit connections: every transaction is an explicit `conn.transaction()` block, which begins with
        # the connection's isolation level and read-only flag (set for readers in _configure_reader).
        options = {"connect_timeout": CONNECT_TIMEOUT_S, "autocommit": True}
        self.pool = ConnectionPool(url, min_size=1, max_size=POOL_SIZE, configure=_configure, open=True,
                                   name="citerag-write", kwargs=options, timeout=CONNECT_TIMEOUT_S)
        self.read_pool = ConnectionPool(read_url or url, min_size=1, max_size=POOL_SIZE, configure=_configure_reader,
                                        open=True, name="citerag-read", kwargs=options, timeout=CONNECT_TIMEOUT_S)

    def _collection_id(self, conn: psycopg.Connection[Any], create: bool) -> int:
        row = conn.execute("SELECT id FROM collections WHERE name = %s", (self.collection,)).fetchone()
        if row is None and create:
            conn.execute("INSERT INTO collections (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                         (self.collection,))
            row = conn.execute("SELECT id FROM collections WHERE name = %s", (self.collection,)).fetchone()
        if row is None:
            raise CiteragError(f"no collection {self.collection!r} in {self._where}: run `citerag ingest PATH` first")
        return int(row[0])

    def close(self) -> None:
        self._closed = True
        for pool in (self.pool, self.read_pool):
            pool.close()

    # Transactions
    @contextmanager
    def _environment(self, doing: str) -> Iterator[None]:
        if self._closed:
            raise CiteragError(f"the store of collection {self.collection!r} at {self._where} was closed")
        try:
            yield
        except _ENVIRONMENT as exc:
            raise StoreUnavailable(f"cannot {doing} the store at {self._where}: {first_line(exc)}") from exc

    @contextmanager
    def _write(self, doing: str = "write") -> Iterator[psycopg.Connection[Any]]:
        """One transaction on the primary, rolled back whole on any error: writes, and the reads (status,
        documents) that must see what was just written, never a replica's lag (`_read`)."""
        with self._environment(doing), self.pool.connection() as conn, conn.transaction():
            yield conn

    def _read(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        return self._write("read")

    def _bump(self, conn: psycopg.Connection[Any], doc_id: int) -> None:
        """Next generation and its change-log row. The row lock on the collection serialises its writers, so
        generations are gapless and in commit order."""
        row = conn.execute("UPDATE collections SET generation = generation + 1 WHERE id = %s RETURNING generation",
                           (self.collection_id,)).fetchone()
        if row is None:
            raise CiteragError(f"collection {self.collection!r} was deleted")
        conn.execute("INSERT INTO changes (collection_id, generation, document_id) VALUES (%s, %s, %s)",
                     (self.collection_id, row[0], doc_id))

    def _drop_version(self, conn: psycopg.Connection[Any], doc_id: int) -> None:
        """Remove a document's chunks and its rows in every search index (whatever model indexed it)."""
        models = [r[0] for r in conn.execute(
            "SELECT DISTINCT model FROM chunk_vectors WHERE collection_id = %s AND document_id = %s"
            " UNION SELECT DISTINCT model FROM lexical_chunks WHERE collection_id = %s AND document_id = %s",
            (self.collection_id, doc_id, self.collection_id, doc_id))]
        for model in models:
            for index in self._search_rows(conn, self.collection_id, model):
                index.remove_documents([doc_id])
        conn.execute("DELETE FROM chunks WHERE collection_id = %s AND document_id = %s", (self.collection_id, doc_id))

    # Reading
    def _documents(self, where: str, args: tuple[Any, ...], locators: bool = False) -> list[Document]:
        with self._read() as conn:
            rows = conn.execute(f"SELECT {DOC_COLUMNS}, locators FROM documents WHERE collection_id = %s {where}",
                                (self.collection_id, *args)).fetchall()
        out = []
        for row in rows:
            doc = document(row)
            if locators:
                doc.locators = [Locator.from_json(d) for d in row[-1]]
            out.append(doc)
        return out

    def documents(self) -> list[Document]:
        return self._documents("ORDER BY source_path", ())

    def document(self, doc_id: int) -> Document | None:
        found = self._documents("AND id = %s", (doc_id,), locators=True)
        return found[0] if found else None

    def document_by_path(self, source_path: str) -> Document | None:
        found = self._documents("AND source_path = %s", (source_path,))
        return found[0] if found else None

    def locators(self, doc_id: int) -> list[Locator]:
        doc = self.document(doc_id)
        return doc.locators if doc else []

    def canonical_text(self, doc_id: int) -> str:
        with self._read() as conn:
            row = conn.execute("SELECT canonical_text FROM documents WHERE collection_id = %s AND id = %s",
                               (self.collection_id, doc_id)).fetchone()
        if row is None or row[0] is None:
            raise CiteragError(f"document {doc_id} has no indexed text")
        return str(row[0])

    def chunk_stats(self) -> dict[int, ChunkStats]:
        out: dict[int, ChunkStats] = {}
        with self._read() as conn:
            rows = conn.execute("SELECT document_id, tokens, header_tokens FROM chunks WHERE collection_id = %s"
                                " ORDER BY document_id, ordinal", (self.collection_id,)).fetchall()
        for doc_id, tokens, header in rows:
            stats = out.setdefault(doc_id, ChunkStats())
            stats.tokens.append(tokens)
            stats.header_tokens.append(header)
        return out

    def generation(self) -> int:
        with self._read() as conn:
            row = conn.execute("SELECT generation FROM collections WHERE id = %s", (self.collection_id,)).fetchone()
        if row is None:
            raise CiteragError(f"collection {self.collection!r} was deleted")
        return int(row[0])

    # Writing
    def add_pending(self, source_path: str, name: str, sha256: str) -> int:
        with self._write() as conn:
            row = conn.execute(
                "INSERT INTO documents (collection_id, source_path, name, sha256, status, updated_at)"
                " VALUES (%s, %s, %s, %s, 'pending', %s) RETURNING id",
                (self.collection_id, source_path, name, sha256, _now())).fetchone()
            assert row is not None
            self._bump(conn, row[0])
        return int(row[0])

    def save_indexed(self, doc_id: int, *, title: str, sha256: str, stamps: dict[str, Any],
                     canonical_text: str, warnings: list[str], chunks: list[Chunk], vectors: np.ndarray,
                     stats: ChunkStats, locators: list[Locator] | None = None, replaces: str | None = None) -> None:
        vecs = checked_vectors(chunks, vectors)
        model = str(stamps.get("embedding_model", ""))
        with self._write() as conn:
            # The document row first, locked: a concurrent delete or save of the same document waits here.
            row = conn.execute("SELECT sha256 FROM documents WHERE collection_id = %s AND id = %s FOR UPDATE",
                               (self.collection_id, doc_id)).fetchone()
            if row is None:
                raise CiteragError(f"no document {doc_id} in collection {self.collection!r}")
            if replaces is not None and row[0] != replaces:
                raise Superseded(f"document {doc_id} no longer has the version being rebuilt")
            self._drop_version(conn, doc_id)
            ids = [r[0] for r in conn.execute("SELECT nextval('chunk_ids') FROM generate_series(1, %s)",
                                              (len(chunks),))] if chunks else []
            with conn.cursor().copy(
                    "COPY chunks (id, collection_id, document_id, ordinal, text, content, section, start_offset,"
                    " end_offset, tokens, header_tokens) FROM STDIN") as copy:
                for i, c in enumerate(chunks):
                    copy.write_row((ids[i], self.collection_id, doc_id, i, c.text, c.content, c.section, c.start,
                                    c.end, stats.tokens[i], stats.header_tokens[i]))
            if chunks:
                batch = ChunkBatch(ids=np.array(ids, dtype=np.int64),
                                   document_ids=np.full(len(ids), doc_id, dtype=np.int64),
                                   texts=[c.text for c in chunks], vectors=vecs)
                for index in self._search_rows(conn, self.collection_id, model):
                    index.add(batch)
            conn.execute(
                "UPDATE documents SET title = %s, sha256 = %s, status = 'indexed', error = NULL, warnings = %s,"
                " chunk_count = %s, stamps = %s, canonical_text = %s, locators = %s, updated_at = %s"
                " WHERE collection_id = %s AND id = %s",
                (title, sha256, json.dumps(warnings), len(chunks), json.dumps(stamps, sort_keys=True),
                 canonical_text, json.dumps([loc.as_json() for loc in locators or []]), _now(),
                 self.collection_id, doc_id))
            self._bump(conn, doc_id)

    def save_failed(self, doc_id: int, *, sha256: str, stamps: dict[str, Any], error: str) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM documents WHERE collection_id = %s AND id = %s FOR UPDATE",
                            (self.collection_id, doc_id)).fetchone() is None:
                return
            self._drop_version(conn, doc_id)
            conn.execute(
                "UPDATE documents SET sha256 = %s, status = 'failed', error = %s, chunk_count = 0, stamps = %s,"
                " canonical_text = NULL, locators = '[]', updated_at = %s WHERE collection_id = %s AND id = %s",
                (sha256, error, json.dumps(stamps, sort_keys=True), _now(), self.collection_id, doc_id))
            self._bump(conn, doc_id)

    def set_error(self, doc_id: int, error: str | None) -> None:
        with self._write() as conn:
            if conn.execute("UPDATE documents SET error = %s WHERE collection_id = %s AND id = %s",
                            (error, self.collection_id, doc_id)).rowcount:
                self._bump(conn, doc_id)

    def set_tags(self, doc_id: int, tags: list[str]) -> bool:
        return self._set_list("tags", doc_id, tags)

    def set_groups(self, doc_id: int, groups: list[str]) -> bool:
        return self._set_list("read_groups", doc_id, groups)

    def _set_list(self, column: str, doc_id: int, values: list[str]) -> bool:  # column: one of the two above
        with self._write() as conn:
            if found := conn.execute(f"UPDATE documents SET {column} = %s::jsonb WHERE collection_id = %s"
                                     " AND id = %s", (json.dumps(values), self.collection_id, doc_id)).rowcount > 0:
                self._bump(conn, doc_id)
            return found

    def delete(self, doc_id: int) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM documents WHERE collection_id = %s AND id = %s FOR UPDATE",
                            (self.collection_id, doc_id)).fetchone() is None:
                return
            self._drop_version(conn, doc_id)
            conn.execute("DELETE FROM documents WHERE collection_id = %s AND id = %s", (self.collection_id, doc_id))
            self._bump(conn, doc_id)

    def refusal_rule(self, encoder: str) -> str | None:
        with self._read() as conn:
            row = conn.execute("SELECT rule FROM refusal_rules WHERE collection_id = %s AND encoder = %s",
                               (self.collection_id, encoder)).fetchone()
        return None if row is None else json.dumps(row[0])

    def save_refusal_rule(self, encoder: str, rule: str) -> None:
        json.loads(rule)  # refuse what is not JSON before it reaches the database
        with self._write() as conn:
            conn.execute("INSERT INTO refusal_rules (collection_id, encoder, rule, fitted_at)"
                         " VALUES (%s, %s, %s::jsonb, now()) ON CONFLICT (collection_id, encoder)"
                         " DO UPDATE SET rule = EXCLUDED.rule, fitted_at = EXCLUDED.fitted_at",
                         (self.collection_id, encoder, rule))

    def drop_collection(self) -> None:
        """Delete the collection and every row of it, search indexes included, in one transaction."""
        with self._write() as conn:
            # No foreign key to collections: see the schema.
            for table in ("chunk_vectors", "lexical_chunks", "bm25_segments", "bm25_terms", "bm25_removed"):
                conn.execute(f"DELETE FROM {table} WHERE collection_id = %s", (self.collection_id,))
            conn.execute("DELETE FROM collections WHERE id = %s", (self.collection_id,))

    # Search
    @contextmanager
    def view(self) -> Iterator[PostgresView]:
        with self._environment("read"), self.read_pool.connection() as conn, conn.transaction():
            yield PostgresView(conn, self.collection_id)

    def snapshot(self, embedding_model: str) -> Snapshot:
        with self.view() as view:
            return view.snapshot(embedding_model)

    # Conversations (citerag.store.conversations): their own short transactions; the generation is left alone.
    def add_turn(self, conversation_id: str, owner: str, turn: Turn) -> Turn:
        with self._write() as conn:
            return conversations.add_turn(conn, PH, conversation_id, owner, turn, self._scope, lock=" FOR UPDATE")

    def conversations(self, owner: str, limit: int = 100) -> list[ConversationInfo]:
        with self._read() as conn:
            return conversations.list_for(conn, PH, owner, limit, self._scope)

    def conversation(self, conversation_id: str) -> tuple[ConversationInfo, list[Turn]] | None:
        with self._read() as conn:
            return conversations.read(conn, PH, conversation_id, self._scope)

    def delete_conversation(self, conversation_id: str) -> bool:
        with self._write() as conn:
            return conversations.delete(conn, PH, conversation_id, self._scope)

    # Labels, experiments and sources (citerag.store.labels, .experiments, .sources): likewise.
    def add_label(self, label: Label) -> Label:
        with self._write() as conn:
            return labels.put(conn, PH, label, self._scope)

    def labels(self) -> list[Label]:
        with self._read() as conn:
            return labels.every(conn, PH, self._scope)

    def start_experiment(self, experiment: Experiment) -> Experiment:
        with self._write() as conn:
            return experiments.start(conn, PH, experiment, self._scope)

    def stop_experiment(self) -> Experiment | None:
        with self._write() as conn:
            return experiments.stop(conn, PH, self._scope)

    def experiments(self) -> list[Experiment]:
        with self._read() as conn:
            return experiments.every(conn, PH, self._scope)

    def sources(self) -> list[SourceInfo]:
        with self._read() as conn:
            return sources.every(conn, PH, self._scope)

    def put_source(self, info: SourceInfo, create: bool = False) -> SourceInfo:
        with self._write() as conn:
            return sources.put(conn, PH, info, create, self._scope)

    def remove_source(self, name: str) -> bool:
        with self._write() as conn:
            return sources.remove(conn, PH, name, self._scope)

    def lease_source(self, name: str, holder: str, seconds: float, take_from: str | None = None) -> str | None:
        with self._write() as conn:
            return sources.lease(conn, PH, name, holder, seconds, take_from, self._scope)

    def source_items(self, name: str) -> list[SourceItem]:
        with self._read() as conn:
            return sources.items(conn, PH, name, self._scope)

    def source_records(self, document_ids: Iterable[int]) -> dict[int, SourceItem]:
        with self._read() as conn:
            return sources.of_documents(conn, PH, document_ids, self._scope)

    def set_source_item(self, name: str, key: str, item: SourceItem | None) -> None:
        with self._write() as conn:
            sources.set_item(conn, PH, name, key, item, self._scope)

    @property
    def _scope(self) -> dict[str, Any]:
        return {"collection_id": self.collection_id}
