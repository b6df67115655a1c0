"""The embedded default: one SQLite file in the index directory, vectors as float32 blobs.

Search is exact (a matrix product over every vector), which is what the evaluation measures and is
fast enough for tens of thousands of chunks; an approximate index belongs to the server backends.

Concurrency: the file is in WAL mode, so readers (search, `status`) never wait for the indexer and see
whole commits only. Opening a current index reads and nothing else; only creating or upgrading one writes.

A read-only mount: SQLite cannot open a WAL file whose -shm it cannot create ("unable to open database file"),
so an index on a file system mounted read-only is opened immutable (nobody can change it there, root included)
and answers searches; every write says the file system is read-only instead of failing half way.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from citerag.errors import FULL, READ_ONLY, CiteragError, StoreUnavailable, Superseded
from citerag.store.base import ChunkBatch, ChunkStats, Snapshot, checked_vectors
from citerag.types import Chunk, Document, Locator, StoredChunk

DB_NAME = "index.sqlite3"
SCHEMA_VERSION = 4
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another writer before the store counts as unavailable

# The change log: which document each generation changed, so that a search index that lags catches up per
# document instead of rebuilding. One row per change is small; it is never trimmed.
_CHANGES = "CREATE TABLE changes (generation INTEGER PRIMARY KEY, document_id INTEGER NOT NULL)"

# The current schema, as a new index gets it. An older index reaches the same shape through _MIGRATIONS.
_CREATE = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE documents (
    id INTEGER PRIMARY KEY,
    source_path TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    sha256 TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'indexed', 'failed')),
    error TEXT,
    warnings TEXT NOT NULL DEFAULT '[]',
    chunk_count INTEGER NOT NULL DEFAULT 0,
    stamps TEXT NOT NULL DEFAULT '{}',
    canonical_text TEXT,
    locators TEXT NOT NULL DEFAULT '[]',
    updated_at TEXT NOT NULL
)""",
    """CREATE TABLE chunks (
    id INTEGER PRIMARY KEY,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    content TEXT NOT NULL,
    section TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    header_tokens INTEGER NOT NULL,
    vector BLOB NOT NULL
)""",
    "CREATE INDEX chunks_by_document ON chunks(document_id, ordinal)",
    "INSERT INTO meta VALUES ('generation', '0')",
    _CHANGES,
    "INSERT INTO meta VALUES ('log_start', '0')",
    "INSERT INTO meta VALUES ('next_chunk_id', '1')",
)


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def _add_locators(db: sqlite3.Connection) -> None:
    # Tolerant: an index whose marker was lost or rewritten may have the column already.
    if "locators" not in _columns(db, "documents"):
        db.execute("ALTER TABLE documents ADD COLUMN locators TEXT NOT NULL DEFAULT '[]'")


def _add_generation(db: sqlite3.Connection) -> None:
    db.execute("INSERT OR IGNORE INTO meta VALUES ('generation', '0')")


def _add_change_log(db: sqlite3.Connection) -> None:
    # The log starts now: an index built before it must rebuild once, which `changed_documents` says by None.
    db.execute(_CHANGES.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    db.execute("INSERT OR REPLACE INTO meta SELECT 'log_start', value FROM meta WHERE key = 'generation'")
    db.execute("INSERT OR REPLACE INTO meta SELECT 'next_chunk_id', COALESCE(MAX(id), 0) + 1 FROM chunks")


# (the version a step reaches, what it adds, the step). Steps run in order inside one write transaction,
# so an upgrade is all or nothing; never edit a released step, append a new one.
_MIGRATIONS: list[tuple[int, str, Callable[[sqlite3.Connection], None]]] = [
    (2, "documents.locators: the extractor's locator map", _add_locators),
    (3, "meta generation: bumped with every change, so readers know when their snapshot is stale", _add_generation),
    (4, "changes: the document each generation changed, so search indexes catch up per document; chunk ids "
        "from a counter, never reused", _add_change_log),
]
assert _MIGRATIONS[-1][0] == SCHEMA_VERSION

_DOC_COLUMNS = "id, source_path, name, title, sha256, status, error, warnings, chunk_count, stamps, updated_at"

# Failures of the machine rather than of a document or of the code: full disk, I/O, read-only file, lock timeout.
_ENVIRONMENT_CODES = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_BUSY", "SQLITE_LOCKED",
                      "SQLITE_CANTOPEN")
_ENVIRONMENT_TEXTS = ("database or disk is full", "disk i/o error", "readonly database", "database is locked",
                      "database table is locked", "unable to open")
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO}


def _environment_cause(exc: BaseException) -> str | None:
    """The cause, in one line, when `exc` says the store cannot be used at all; None for anything else."""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc)
        code = getattr(exc, "sqlite_errorname", "")
        if code.startswith(_ENVIRONMENT_CODES) or any(t in text.lower() for t in _ENVIRONMENT_TEXTS):
            return text
    elif isinstance(exc, OSError) and exc.errno in _ENVIRONMENT_ERRNOS:
        return exc.strerror or str(exc)
    return None


def _cause_kind(exc: BaseException) -> str | None:
    """FULL or READ_ONLY when the failure is one of those (StoreUnavailable.cause), else None."""
    code = getattr(exc, "sqlite_errorname", "")
    number = getattr(exc, "errno", None)
    if code.startswith("SQLITE_FULL") or number in (errno.ENOSPC, errno.EDQUOT):
        return FULL
    if code.startswith("SQLITE_READONLY") or number == errno.EROFS:
        return READ_ONLY
    return None


def _on_read_only_mount(folder: Path) -> bool:
    """Whether `folder` is on a file system mounted read-only (file permissions do not stop root; a mount does)."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _locators_json(locators: list[Locator]) -> str:
    return json.dumps([loc.as_json() for loc in locators], separators=(",", ":"))


def _document(row: tuple[Any, ...]) -> Document:
    return Document(id=row[0], source_path=row[1], name=row[2], title=row[3], sha256=row[4], status=row[5],
                    error=row[6], warnings=json.loads(row[7]), chunk_count=row[8],
                    stamps=json.loads(row[9]), updated_at=row[10])


def _bump_generation(db: sqlite3.Connection, doc_id: int) -> None:
    """Next generation and its change-log row, inside the caller's write transaction."""
    db.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation'")
    db.execute("INSERT INTO changes SELECT CAST(value AS INTEGER), ? FROM meta WHERE key = 'generation'", (doc_id,))


_IN_BATCH = 500  # ids per `IN (...)`: well under SQLite's variable limit


def _batches(ids: Iterable[int]) -> Iterator[list[int]]:
    items = list(ids)
    for i in range(0, len(items), _IN_BATCH):
        yield items[i:i + _IN_BATCH]


_MODEL = "json_extract(d.stamps, '$.embedding_model')"


class SqliteView:
    """One read transaction on this thread's connection (see Store.view)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])

    def changed_documents(self, since: int) -> list[int] | None:
        start = int(self._db.execute("SELECT value FROM meta WHERE key = 'log_start'").fetchone()[0])
        if since < start:
            return None
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT document_id FROM changes WHERE generation > ? ORDER BY document_id", (since,))]

    def indexed_chunks(self, embedding_model: str, document_ids: Sequence[int] | None = None,
                       batch: int = 20_000) -> Iterator[ChunkBatch]:
        sql = ("SELECT c.id, c.document_id, c.text, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id"
               f" WHERE d.status = 'indexed' AND {_MODEL} = ?")
        groups: Iterable[list[int] | None] = [None] if document_ids is None else _batches(sorted(document_ids))
        for group in groups:
            where = "" if group is None else f" AND c.document_id IN ({','.join('?' * len(group))})"
            cursor = self._db.execute(sql + where + " ORDER BY c.id", (embedding_model, *(group or [])))
            while rows := cursor.fetchmany(batch):
                dim = len(rows[0][3]) // 4
                yield ChunkBatch(ids=np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)),
                                 document_ids=np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)),
                                 texts=[r[2] for r in rows],
                                 vectors=np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32)
                                 .reshape(len(rows), dim))

    def chunks(self, ids: Iterable[int]) -> dict[int, StoredChunk]:
        out: dict[int, StoredChunk] = {}
        for group in _batches(ids):
            for row in self._db.execute(
                    "SELECT id, document_id, ordinal, text, content, section, start_offset, end_offset FROM chunks"
                    f" WHERE id IN ({','.join('?' * len(group))})", group):
                out[row[0]] = StoredChunk(*row)
        return out

    def documents(self, ids: Iterable[int]) -> dict[int, Document]:
        out: dict[int, Document] = {}
        for group in _batches(ids):
            for row in self._db.execute(f"SELECT {_DOC_COLUMNS}, locators FROM documents"
                                        f" WHERE id IN ({','.join('?' * len(group))})", group):
                doc = _document(row)
                doc.locators = [Locator.from_json(d) for d in json.loads(row[-1])]
                out[doc.id] = doc
        return out

    def texts(self, ids: Iterable[int]) -> dict[int, str]:
        out: dict[int, str] = {}
        for group in _batches(ids):
            for doc_id, text in self._db.execute(
                    f"SELECT id, canonical_text FROM documents WHERE id IN ({','.join('?' * len(group))})"
                    " AND canonical_text IS NOT NULL", group):
                out[doc_id] = text
        return out

    def excluded_documents(self, embedding_model: str) -> int:
        return int(self._db.execute(
            f"SELECT count(*) FROM documents d WHERE d.status = 'indexed' AND {_MODEL} IS NOT ?",
            (embedding_model,)).fetchone()[0])


class SqliteStore:
    def __init__(self, index_dir: Path, create: bool = False, *, busy_timeout: float = BUSY_TIMEOUT_S) -> None:
        self.path = index_dir / DB_NAME
        if index_dir.exists() and not index_dir.is_dir():
            raise CiteragError(f"index path {index_dir} is not a directory")
        if not self.path.exists():
            if not create:
                raise CiteragError(f"no index at {index_dir}: run `citerag ingest PATH` first")
            if index_dir.is_dir() and _on_read_only_mount(index_dir):
                raise StoreUnavailable(f"cannot create an index in {index_dir}: read-only file system", READ_ONLY)
            try:
                index_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CiteragError(f"cannot create index directory {index_dir}: {exc.strerror}") from exc
        # One connection per thread (a service answers from several): sqlite3 connections must not be shared
        # between threads, and under WAL each thread's reads see whole commits on their own.
        self._busy_ms = int(busy_timeout * 1000)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._connect()
        except sqlite3.DatabaseError as exc:
            raise CiteragError(f"cannot open index at {index_dir}: {exc}") from exc
        try:
            self._open(index_dir, create)
        except BaseException:
            self.close()
            raise

    @property
    def _db(self) -> sqlite3.Connection:
        """This thread's connection, opened on its first use."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is not None:
            if not self._local.read_only or _on_read_only_mount(self.path.parent):
                return db
            # Mounted read-write again: an immutable connection would miss (or tear on) the writes that follow.
            db.close()
            with self._lock:
                if db in self._connections:
                    self._connections.remove(db)
        if self._closed:
            raise CiteragError(f"the index at {self.path.parent} was closed")
        return self._connect()

    def _connect(self) -> sqlite3.Connection:
        with self._environment("open"):
            # check_same_thread=False only so that close() may run on another thread; each connection is
            # used by the thread that opened it.
            read_only = _on_read_only_mount(self.path.parent) and self.path.exists()
            db = sqlite3.connect(self._read_only_uri() if read_only else self.path, isolation_level=None,
                                 check_same_thread=False, uri=read_only)
            # Connection settings only: nothing here writes to the file.
            db.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            db.execute("PRAGMA foreign_keys = ON")
        self._local.db, self._local.read_only = db, read_only
        with self._lock:
            self._connections.append(db)
        return db

    def _read_only_uri(self) -> str:
        """The URI that reads the file on a read-only mount: immutable when every commit is in the main file (a
        clean close checkpoints and removes the -wal), else read-only through the -wal and -shm a writer left."""
        wal, shm = (self.path.with_name(self.path.name + suffix) for suffix in ("-wal", "-shm"))
        if not wal.exists() or wal.stat().st_size == 0:
            return f"file:{quote(str(self.path))}?immutable=1"
        if not shm.exists():
            raise StoreUnavailable(f"cannot open the index at {self.path}: it is on a read-only file system and its "
                                   f"last writes are only in {wal.name}: mount it read-write once to complete them",
                                   READ_ONLY)
        return f"file:{quote(str(self.path))}?mode=ro"

    def _open(self, index_dir: Path, create: bool) -> None:
        try:
            with self._environment("open"):
                found = self._schema_version()
                if found == SCHEMA_VERSION:
                    return
                self._check_upgradable(index_dir, found, create)
                self._upgrade(index_dir, create)
        except sqlite3.DatabaseError as exc:
            raise CiteragError(f"cannot open index at {index_dir}: {exc}") from exc

    def _check_upgradable(self, index_dir: Path, found: int | None, create: bool) -> None:
        if found is None and not create:
            raise CiteragError(f"no index at {index_dir} ({self.path} is an empty database): "
                               "run `citerag ingest PATH` first")
        if found is not None and found > SCHEMA_VERSION:
            raise CiteragError(f"the index at {index_dir} has schema version {found}, this citerag knows up to "
                               f"{SCHEMA_VERSION}: upgrade citerag")

    def _schema_version(self) -> int | None:
        """The version the file is at, None for an empty database (no tables at all)."""
        tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" in tables:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None:
                try:
                    return int(row[0])
                except ValueError:
                    raise CiteragError(f"the index at {self.path.parent} has an unreadable schema version "
                                       f"{row[0]!r}") from None
        if "documents" in tables:
            # A lost marker is no proof of the current schema: read the version off what each step added.
            if "changes" in tables:
                return 4
            if "meta" in tables and self._db.execute("SELECT 1 FROM meta WHERE key = 'generation'").fetchone():
                return 3
            return 2 if "locators" in _columns(self._db, "documents") else 1
        if tables:
            raise CiteragError(f"{self.path} is not a citerag index (tables: {', '.join(sorted(tables))})")
        return None

    def _upgrade(self, index_dir: Path, create: bool) -> None:
        """Create the schema or migrate to it, in one write transaction, before anything reads the index."""
        if self._local.read_only:
            raise StoreUnavailable(f"cannot {'create' if create else 'upgrade'} the index at {self.path}: "
                                   "read-only file system", READ_ONLY)
        # WAL is a property of the file: set once by the writer that creates or upgrades it, never by readers.
        self._db.execute("PRAGMA journal_mode = WAL")
        with self._write():
            found = self._schema_version()  # again, under the write lock: another process may have upgraded it
            self._check_upgradable(index_dir, found, create)
            if found == SCHEMA_VERSION:
                return
            if found is None:
                for statement in _CREATE:
                    self._db.execute(statement)
            else:
                self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                for version, _what, step in _MIGRATIONS:
                    if version > found:
                        step(self._db)
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        # Threads that ended keep their connection here until now: a worker pool reuses its threads.
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for db in connections:
            db.close()
        self._local = threading.local()

    @contextmanager
    def _environment(self, doing: str) -> Iterator[None]:
        """Turn a full disk, an I/O error, a read-only file or a lock timeout into StoreUnavailable."""
        try:
            yield
        except (sqlite3.OperationalError, OSError) as exc:
            cause = _environment_cause(exc)
            if cause is None:
                raise
            raise StoreUnavailable(f"cannot {doing} the index at {self.path}: {cause}", _cause_kind(exc)) from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back whole on any error (autocommit mode otherwise)."""
        with self._environment("write"):
            db = self._db  # one connection for the whole transaction
            if self._local.read_only:
                raise StoreUnavailable(f"cannot write the index at {self.path}: read-only file system", READ_ONLY)
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                # SQLite rolls back by itself on some errors (a full disk); a second ROLLBACK would fail.
                # If ROLLBACK fails too, the original error is the one to report; closing undoes the rest.
                if db.in_transaction:
                    with suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: under WAL every statement in it sees the same commit."""
        with self._environment("read"):
            db = self._db  # one connection for the whole transaction
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")  # ends the read; there is nothing to write

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._environment("read"):
            return self._db.execute(sql, args).fetchall()

    def _one(self, where: str, arg: Any) -> Document | None:
        rows = self._rows(f"SELECT {_DOC_COLUMNS} FROM documents WHERE {where}", (arg,))
        return _document(rows[0]) if rows else None

    def documents(self) -> list[Document]:
        return [_document(r) for r in self._rows(f"SELECT {_DOC_COLUMNS} FROM documents ORDER BY source_path")]

    def document(self, doc_id: int) -> Document | None:
        rows = self._rows(f"SELECT {_DOC_COLUMNS}, locators FROM documents WHERE id = ?", (doc_id,))
        if not rows:
            return None
        doc = _document(rows[0])
        doc.locators = [Locator.from_json(d) for d in json.loads(rows[0][-1])]
        return doc

    def locators(self, doc_id: int) -> list[Locator]:
        rows = self._rows("SELECT locators FROM documents WHERE id = ?", (doc_id,))
        return [Locator.from_json(d) for d in json.loads(rows[0][0])] if rows else []

    def document_by_path(self, source_path: str) -> Document | None:
        return self._one("source_path = ?", source_path)

    def generation(self) -> int:
        rows = self._rows("SELECT value FROM meta WHERE key = 'generation'")
        return int(rows[0][0])

    def add_pending(self, source_path: str, name: str, sha256: str) -> int:
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO documents (source_path, name, sha256, status, updated_at)"
                " VALUES (?, ?, ?, 'pending', ?)", (source_path, name, sha256, _now()))
            doc_id = int(cur.lastrowid or 0)
            _bump_generation(db, doc_id)
        return doc_id

    def save_indexed(self, doc_id: int, *, title: str, sha256: str, stamps: dict[str, Any],
                     canonical_text: str, warnings: list[str], chunks: list[Chunk], vectors: np.ndarray,
                     stats: ChunkStats, locators: list[Locator] | None = None, replaces: str | None = None) -> None:
        vecs = checked_vectors(chunks, vectors)
        # One transaction: readers see the old version of the document or the new one, never half.
        with self._write() as db:
            if replaces is not None:
                row = db.execute("SELECT sha256 FROM documents WHERE id = ?", (doc_id,)).fetchone()
                if row is None or row[0] != replaces:
                    raise Superseded(f"document {doc_id} no longer has the version being rebuilt")
            # Ids from a counter, never reused (a rowid would be, after the highest is deleted): search indexes
            # key vectors by chunk id, and an id meaning two chunks over time would need care in every index.
            first = int(db.execute("SELECT value FROM meta WHERE key = 'next_chunk_id'").fetchone()[0])
            rows = [(first + i, doc_id, i, c.text, c.content, c.section, c.start, c.end, stats.tokens[i],
                     stats.header_tokens[i], vecs[i].tobytes()) for i, c in enumerate(chunks)]
            db.execute("UPDATE meta SET value = ? WHERE key = 'next_chunk_id'", (str(first + len(chunks)),))
            db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
            db.executemany(
                "INSERT INTO chunks (id, document_id, ordinal, text, content, section, start_offset, end_offset,"
                " tokens, header_tokens, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            db.execute(
                "UPDATE documents SET title = ?, sha256 = ?, status = 'indexed', error = NULL, warnings = ?,"
                " chunk_count = ?, stamps = ?, canonical_text = ?, locators = ?, updated_at = ? WHERE id = ?",
                (title, sha256, json.dumps(warnings), len(chunks), json.dumps(stamps, sort_keys=True),
                 canonical_text, _locators_json(locators or []), _now(), doc_id))
            _bump_generation(db, doc_id)

    def save_failed(self, doc_id: int, *, sha256: str, stamps: dict[str, Any], error: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM chunks WHERE document_id = ?", (doc_id,))
            cur = db.execute(
                "UPDATE documents SET sha256 = ?, status = 'failed', error = ?, chunk_count = 0, stamps = ?,"
                " canonical_text = NULL, locators = '[]', updated_at = ? WHERE id = ?",
                (sha256, error, json.dumps(stamps, sort_keys=True), _now(), doc_id))
            if cur.rowcount:
                _bump_generation(db, doc_id)

    def set_error(self, doc_id: int, error: str | None) -> None:
        # The reason only: status, chunks, text, stamps, sha256 and updated_at still describe the served version,
        # so a failed re-index neither hides the old version nor makes it look current.
        with self._write() as db:
            if db.execute("UPDATE documents SET error = ? WHERE id = ?", (error, doc_id)).rowcount:
                _bump_generation(db, doc_id)

    def delete(self, doc_id: int) -> None:
        with self._write() as db:
            if db.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount:
                _bump_generation(db, doc_id)

    def canonical_text(self, doc_id: int) -> str:
        rows = self._rows("SELECT canonical_text FROM documents WHERE id = ?", (doc_id,))
        if not rows or rows[0][0] is None:
            raise CiteragError(f"document {doc_id} has no indexed text")
        return str(rows[0][0])

    def chunk_stats(self) -> dict[int, ChunkStats]:
        out: dict[int, ChunkStats] = {}
        for doc_id, tokens, header in self._rows(
                "SELECT document_id, tokens, header_tokens FROM chunks ORDER BY document_id, ordinal"):
            stats = out.setdefault(doc_id, ChunkStats())
            stats.tokens.append(tokens)
            stats.header_tokens.append(header)
        return out

    @contextmanager
    def view(self) -> Iterator[SqliteView]:
        with self._read() as db:
            yield SqliteView(db)

    def snapshot(self, embedding_model: str) -> Snapshot:
        # Documents, texts, chunks and vectors from one read transaction: a commit landing between two of
        # these queries would otherwise pair chunks with another version's text (torn reads).
        with self._read() as db:
            generation = int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
            docs: dict[int, Document] = {}
            texts: dict[int, str] = {}
            excluded = 0
            for row in db.execute(f"SELECT {_DOC_COLUMNS}, locators, canonical_text FROM documents"
                                  " WHERE status = 'indexed' ORDER BY source_path"):
                doc = _document(row)
                if doc.stamps.get("embedding_model") != embedding_model:
                    excluded += 1
                    continue
                doc.locators = [Locator.from_json(d) for d in json.loads(row[-2])]
                docs[doc.id] = doc
                texts[doc.id] = row[-1]
            chunks, blobs = [], []
            for row in db.execute(
                    "SELECT c.id, c.document_id, c.ordinal, c.text, c.content, c.section, c.start_offset,"
                    " c.end_offset, c.vector FROM chunks c JOIN documents d ON d.id = c.document_id"
                    " WHERE d.status = 'indexed' ORDER BY c.document_id, c.ordinal"):
                if row[1] in docs:
                    chunks.append(StoredChunk(*row[:8]))
                    blobs.append(row[8])
        dim = len(blobs[0]) // 4 if blobs else 0
        vectors = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim) if blobs \
            else np.zeros((0, 0), dtype=np.float32)
        return Snapshot(chunks, docs, vectors, excluded, texts=texts, generation=generation)

    def refusal_rule(self, encoder: str) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (f"refusal_rule:{encoder}",))
        return str(rows[0][0]) if rows else None

    def save_refusal_rule(self, encoder: str, rule: str) -> None:
        # A key of the meta table (key/value): no schema change, and an older citerag ignores it.
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (f"refusal_rule:{encoder}", rule))
