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
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from citerag.errors import FULL, READ_ONLY, CiteragError, StoreUnavailable
from citerag.store import conversations, experiments, labels, sources
from citerag.store import sqlite_reads as reads
from citerag.store import sqlite_schema as schema
from citerag.store import sqlite_writes as writes
from citerag.store.base import ChunkStats, Snapshot, checked_vectors
from citerag.store.sqlite_reads import SqliteView
from citerag.store.sqlite_schema import DB_NAME, SCHEMA_VERSION
from citerag.types import Chunk, ConversationInfo, Document, Experiment, Label, Locator, SourceInfo, SourceItem, Turn

BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another writer before the store counts as unavailable

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


PH = "?"


class SqliteStore:
    """The embedded store (see the module docstring): connections and transactions here; the schema, the reads
    and the writes' statements in sqlite_schema.py, sqlite_reads.py and sqlite_writes.py."""

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
                found = schema.schema_version(self._db, self.path)
                if found == SCHEMA_VERSION:
                    return
                schema.check_upgradable(index_dir, self.path, found, create)
                self._upgrade(index_dir, create)
        except sqlite3.DatabaseError as exc:
            raise CiteragError(f"cannot open index at {index_dir}: {exc}") from exc

    def _upgrade(self, index_dir: Path, create: bool) -> None:
        """Create the schema or migrate to it, in one write transaction, before anything reads the index."""
        if self._local.read_only:
            raise StoreUnavailable(f"cannot {'create' if create else 'upgrade'} the index at {self.path}: "
                                   "read-only file system", READ_ONLY)
        # WAL is a property of the file: set once by the writer that creates or upgrades it, never by readers.
        self._db.execute("PRAGMA journal_mode = WAL")
        with self._write() as db:
            # Again, under the write lock: another process may have upgraded it meanwhile.
            found = schema.schema_version(db, self.path)
            schema.check_upgradable(index_dir, self.path, found, create)
            if found == SCHEMA_VERSION:
                return
            schema.apply(db, found)

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
        rows = self._rows(f"SELECT {reads.DOC_COLUMNS} FROM documents WHERE {where}", (arg,))
        return reads.document(rows[0]) if rows else None

    def documents(self) -> list[Document]:
        rows = self._rows(f"SELECT {reads.DOC_COLUMNS} FROM documents ORDER BY source_path")
        return [reads.document(r) for r in rows]

    def document(self, doc_id: int) -> Document | None:
        rows = self._rows(f"SELECT {reads.DOC_COLUMNS}, locators FROM documents WHERE id = ?", (doc_id,))
        if not rows:
            return None
        doc = reads.document(rows[0])
        doc.locators = reads.locators(rows[0][-1])
        return doc

    def locators(self, doc_id: int) -> list[Locator]:
        rows = self._rows("SELECT locators FROM documents WHERE id = ?", (doc_id,))
        return reads.locators(rows[0][0]) if rows else []

    def document_by_path(self, source_path: str) -> Document | None:
        return self._one("source_path = ?", source_path)

    def generation(self) -> int:
        rows = self._rows("SELECT value FROM meta WHERE key = 'generation'")
        return int(rows[0][0])

    def add_pending(self, source_path: str, name: str, sha256: str) -> int:
        with self._write() as db:
            return writes.add_pending(db, source_path, name, sha256)

    def save_indexed(self, doc_id: int, *, title: str, sha256: str, stamps: dict[str, Any],
                     canonical_text: str, warnings: list[str], chunks: list[Chunk], vectors: np.ndarray,
                     stats: ChunkStats, locators: list[Locator] | None = None, replaces: str | None = None) -> None:
        vecs = checked_vectors(chunks, vectors)
        # One transaction: readers see the old version of the document or the new one, never half.
        with self._write() as db:
            writes.save_indexed(db, doc_id, title=title, sha256=sha256, stamps=stamps,
                                canonical_text=canonical_text, warnings=warnings, chunks=chunks, vecs=vecs,
                                stats=stats, locators=locators, replaces=replaces)

    def save_failed(self, doc_id: int, *, sha256: str, stamps: dict[str, Any], error: str) -> None:
        with self._write() as db:
            writes.save_failed(db, doc_id, sha256=sha256, stamps=stamps, error=error)

    def set_error(self, doc_id: int, error: str | None) -> None:
        with self._write() as db:
            writes.set_error(db, doc_id, error)

    def set_tags(self, doc_id: int, tags: list[str]) -> bool:
        with self._write() as db:
            return writes.set_tags(db, doc_id, tags)

    def set_groups(self, doc_id: int, groups: list[str]) -> bool:
        with self._write() as db:
            return writes.set_groups(db, doc_id, groups)

    def delete(self, doc_id: int) -> None:
        with self._write() as db:
            writes.delete(db, doc_id)

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
        with self._read() as db:
            return reads.snapshot(db, embedding_model)

    def refusal_rule(self, encoder: str) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (f"refusal_rule:{encoder}",))
        return str(rows[0][0]) if rows else None

    def save_refusal_rule(self, encoder: str, rule: str) -> None:
        with self._write() as db:
            writes.save_refusal_rule(db, encoder, rule)

    # Conversations (citerag.store.conversations): their own short transactions; the generation is left alone.
    def add_turn(self, conversation_id: str, owner: str, turn: Turn) -> Turn:
        with self._write() as db:
            return conversations.add_turn(db, PH, conversation_id, owner, turn)

    def conversations(self, owner: str, limit: int = 100) -> list[ConversationInfo]:
        with self._read() as db:
            return conversations.list_for(db, PH, owner, limit)

    def conversation(self, conversation_id: str) -> tuple[ConversationInfo, list[Turn]] | None:
        with self._read() as db:
            return conversations.read(db, PH, conversation_id)

    def delete_conversation(self, conversation_id: str) -> bool:
        with self._write() as db:
            return conversations.delete(db, PH, conversation_id)

    # Labels (citerag.store.labels): likewise.
    def add_label(self, label: Label) -> Label:
        with self._write() as db:
            return labels.put(db, PH, label)

    def labels(self) -> list[Label]:
        with self._read() as db:
            return labels.every(db, PH)

    # Experiments (citerag.store.experiments): likewise.
    def start_experiment(self, experiment: Experiment) -> Experiment:
        with self._write() as db:
            return experiments.start(db, PH, experiment)

    def stop_experiment(self) -> Experiment | None:
        with self._write() as db:
            return experiments.stop(db, PH)

    def experiments(self) -> list[Experiment]:
        with self._read() as db:
            return experiments.every(db, PH)

    # Sources (citerag.store.sources): likewise.
    def sources(self) -> list[SourceInfo]:
        with self._read() as db:
            return sources.every(db, PH)

    def put_source(self, info: SourceInfo, create: bool = False) -> SourceInfo:
        with self._write() as db:
            return sources.put(db, PH, info, create)

    def remove_source(self, name: str) -> bool:
        with self._write() as db:
            return sources.remove(db, PH, name)

    def lease_source(self, name: str, holder: str, seconds: float, take_from: str | None = None) -> str | None:
        with self._write() as db:
            return sources.lease(db, PH, name, holder, seconds, take_from)

    def source_items(self, name: str) -> list[SourceItem]:
        with self._read() as db:
            return sources.items(db, PH, name)

    def source_records(self, document_ids: Iterable[int]) -> dict[int, SourceItem]:
        with self._read() as db:
            return sources.of_documents(db, PH, document_ids)

    def set_source_item(self, name: str, key: str, item: SourceItem | None) -> None:
        with self._write() as db:
            sources.set_item(db, PH, name, key, item)
