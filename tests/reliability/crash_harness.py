"""Crash consistency, measured: ingestion entry points (the CLI, the service, the queue worker) are SIGKILLed at
random moments while they index a folder of 100 real documents, and after every kill a fresh reader proves that
each document is either whole (its row, chunks, vectors, lexical rows and postings, counts and the store's
generation agree, and its canonical text is exactly one of the versions it was given) or invisible to search.

Trials are chained to keep the real encoder affordable: each one starts the entry point where the last kill left
the store, kills it after a random number of commits (plus a random sub-second delay, or at the moment a write
transaction is seen open), checks, and writes new versions of some documents for the next. After the last trial
the entry point runs to completion and every document must be indexed exactly once, at its newest version, with
nothing left for another run to do.

The check is written once against the Store/Collection API; only the SQL that counts a document's raw rows (and
the probe that sees an open write transaction) is per backend: `SqliteRows`, `PostgresRows`.

A plain module (not conftest): `from crash_harness import ...`. The figures the reliability page cites are the
module constants `DOCUMENTS` and `TRIALS`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
from corpus100 import COUNT, make_corpus

from citerag.app.home import Citerag
from citerag.app.models import AskOptions, EmptyCollection, SearchOptions
from citerag.chunk import chunk_extracted
from citerag.extract import extractor_for
from citerag.index.analyzer import Analyzer
from citerag.lang import detect
from citerag.local_postgres import free_port
from citerag.settings import Settings, load_settings

DOCUMENTS = COUNT  # the folder every chain indexes
# Kills per store backend and entry point: at least 20 per backend (issue 13). docs/reliability.md cites these.
TRIALS: dict[str, dict[str, int]] = {"sqlite": {"cli": 10, "service": 10},
                                     "postgres": {"cli": 7, "service": 7, "worker": 7}}
REPLACED = 10  # documents given a new version after a trial that replaces
REPLACE_EVERY = 2  # every other trial replaces: half the re-embedding, the same number of replacements in flight
MAX_DELAY_S = 0.3  # a timed kill lands this long at most after the chosen commit: about one document's indexing
TRANSACTION_WAIT_S = 4.0  # how long a kill aimed at an open write transaction waits to see one
SEED = int(os.environ.get("CITERAG_CRASH_SEED", "1313"))
UNIT_TOLERANCE = 1e-3  # the stores refuse vectors further than this from unit length
DIM = 896  # minilm+use's vectors (the default, real encoder: 384 of MiniLM + 512 of USE)
QUERIES = ("How do I configure the network interface?", "package management with apt and aptitude",
           "backup of the home directory", "Which shell startup files are read at login?")
ASK = "How do I upgrade the whole system to a new release?"


class CrashViolation(AssertionError):
    """Something a reader saw after a kill that must never be: a document lost, half visible, or mixed."""


# The documents and their versions.

@dataclass(frozen=True)
class Version:
    """One version of a document: its bytes, and what a whole indexing of them stores."""

    number: int  # 0 for the folder's original
    data: bytes
    sha256: str
    text: str  # the canonical text
    chunks: tuple[tuple[int, int, str], ...]  # (start, end, embedded text) of each chunk, in order
    postings: int  # distinct terms per chunk, summed: the postings rows of a whole version


def marker(trial: int, name: str) -> str:
    """The paragraph a replacement appends: a word no document has, so that a search can look for it."""
    return (f"\n\nCrash trial {trial} replaced {name} with this version; the word crashmark{trial:02d} is in no "
            "other version.\n")


class Corpus:
    """The 100-document folder and every version each document was given, oldest first."""

    def __init__(self, folder: Path, settings: Settings, count: int = DOCUMENTS) -> None:
        self.folder = folder
        self.settings = settings
        self.names = sorted(make_corpus(folder, count))
        assert len(self.names) == count
        self.versions = {n: [self._version(n, 0, (folder / n).read_bytes())] for n in self.names}
        self._by_text = {(n, v.text): v for n, vs in self.versions.items() for v in vs}
        self.markers: list[str] = []  # the word each replacing trial added, oldest first

    def _version(self, name: str, number: int, data: bytes) -> Version:
        path = Path(name)
        extractor = extractor_for(path)
        assert extractor is not None, name
        extracted = extractor.extract(data, path)
        s = self.settings
        chunks = chunk_extracted(extracted, s.strategy, s.target, s.overlap, language=detect(extracted.text))
        return Version(number, data, hashlib.sha256(data).hexdigest(), extracted.text,
                       tuple((c.start, c.end, c.text) for c in chunks),
                       sum(len(set(Analyzer(s.lexical).terms(c.text))) for c in chunks))

    def latest(self, name: str) -> Version:
        return self.versions[name][-1]

    def version_of(self, name: str, text: str) -> Version | None:
        """The version whose canonical text this is; None for a text that is none of them."""
        return self._by_text.get((name, text))

    def replace(self, name: str, trial: int) -> Version:
        """A new version of `name` (the newest plus a marker paragraph), written into the folder."""
        versions = self.versions[name]
        new = self._version(name, len(versions), versions[-1].data + marker(trial, name).encode())
        versions.append(new)
        if f"crashmark{trial:02d}" not in self.markers:
            self.markers.append(f"crashmark{trial:02d}")
        self._by_text[(name, new.text)] = new
        (self.folder / name).write_bytes(new.data)
        return new


# The per-backend part: raw rows, the change log, and an open write transaction.

@dataclass(frozen=True)
class RawRows:
    """A document's rows in every table (or search index file) that holds a piece of it."""

    chunks: int = 0
    vectors: int = 0
    lexical: int = 0
    postings: int = 0


@dataclass(frozen=True)
class ChangeLog:
    generation: int  # the store's
    newest: int  # the change log's highest generation
    entries: int  # change-log rows
    start: int  # the generation the log starts after
    saved_index: int | None  # the generation the saved search index files claim (None: none saved, or in-store)


class StoreRows(Protocol):
    def generation(self) -> int:
        """The store's generation now (0 before the store exists)."""
        ...

    def writing(self) -> bool:
        """Whether a write transaction of the store is open right now (another process's)."""
        ...

    def rows(self) -> dict[int, RawRows]:
        """Raw rows by document id, for every document id found in any table (orphans included)."""
        ...

    def log(self) -> ChangeLog: ...

    def commits(self) -> dict[int, int]:
        """Change-log entries per document: one for being registered, one per version committed."""
        ...

    def close(self) -> None: ...


class SqliteRows:
    """The embedded store: SQL on INDEX/index.sqlite3, and the search index files a fresh process loads and
    catches up from the change log (what its searches use)."""

    def __init__(self, settings: Settings) -> None:
        from citerag.store.sqlite import DB_NAME

        self.settings = settings
        self.path = settings.sqlite_dir / DB_NAME

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30, isolation_level=None)) as db:
            yield db

    def generation(self) -> int:
        if not self.path.exists():
            return 0
        with self._db() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone() \
                if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone() else None
        return int(row[0]) if row else 0

    def writing(self) -> bool:
        if not self.path.exists():
            return False
        # BEGIN IMMEDIATE takes the one write lock at once or fails: failing means a writer holds it. Held for
        # microseconds; a writer arriving meanwhile waits in its busy handler.
        with closing(sqlite3.connect(self.path, timeout=0, isolation_level=None)) as db:
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return True
            db.execute("ROLLBACK")
        return False

    def _search_rows(self) -> tuple[dict[int, RawRows], int | None]:
        """Live vector rows, lexical rows and postings per document in the search indexes, as a fresh process
        opens them (saved files, caught up from the store's change log); the generation the files claimed."""
        from citerag.index.sync import index_dir, load
        from citerag.store.sqlite import SqliteStore

        s = self.settings
        indexes = load(index_dir(s.sqlite_dir, s.embedding_model, s.vector_index), s.embedding_model, s.vector_index,
                       Analyzer(s.lexical))
        saved = indexes.generation if indexes.generation >= 0 else None
        store = SqliteStore(s.sqlite_dir)
        try:
            with store.view() as view:
                indexes.catch_up(view)
        finally:
            store.close()
        # The BM25 index's live rows and their postings, over its saved segments and the in-memory one (the
        # vector index's rows are checked through the SearchBackend protocol, in Checker._check_indexes).
        lexical: Any = indexes.lexical
        rows = lexical.rows
        per_row = np.zeros(len(rows), dtype=np.int64)
        for segment in lexical.segments:
            per_row += np.bincount(np.asarray(segment.rows, dtype=np.int64), minlength=len(rows))[:len(rows)]
        for pending_rows, _ in lexical._pending.values():
            np.add.at(per_row, np.asarray(pending_rows, dtype=np.int64), 1)
        counts: dict[int, list[int]] = {}
        for doc, n in zip(rows.documents[rows.live].tolist(), per_row[rows.live].tolist(), strict=True):
            found = counts.setdefault(doc, [0, 0])
            found[0] += 1
            found[1] += n
        return {d: RawRows(lexical=lx, postings=p) for d, (lx, p) in counts.items()}, saved

    def rows(self) -> dict[int, RawRows]:
        with self._db() as db:
            stored = {d: (n, v) for d, n, v in db.execute(
                "SELECT document_id, count(*), sum(length(vector) = ?) FROM chunks GROUP BY document_id", (4 * DIM,))}
        search, _ = self._search_rows()
        out: dict[int, RawRows] = {}
        for doc in set(stored) | set(search):
            n, v = stored.get(doc, (0, 0))  # a chunk's vector is a column of its row: those of the right size
            found = search.get(doc, RawRows())
            out[doc] = RawRows(chunks=n, vectors=v, lexical=found.lexical, postings=found.postings)
        return out

    def log(self) -> ChangeLog:
        with self._db() as db:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            newest, entries = db.execute("SELECT coalesce(max(generation), 0), count(*) FROM changes").fetchone()
        _, saved = self._search_rows()
        return ChangeLog(int(meta["generation"]), int(newest), int(entries), int(meta["log_start"]), saved)

    def commits(self) -> dict[int, int]:
        with self._db() as db:
            return dict(db.execute("SELECT document_id, count(*) FROM changes GROUP BY document_id").fetchall())

    def close(self) -> None:
        pass


# The statements of a PostgreSQL store's write transactions (store/postgres.py, index/pgvector.py, pg_bm25.py).
_PG_WRITES = ("%INTO documents%", "%UPDATE documents%", "%FOR UPDATE%", "%chunk_vectors%", "%lexical_chunks%",
              "%bm25_%", "%COPY chunks%", "%nextval('chunk_ids')%", "%INTO changes%", "%UPDATE collections%",
              "%DELETE FROM chunks%")


class PostgresRows:
    """The PostgreSQL store: SQL on its tables (store/pg_schema/*.sql) through the queue tests' Database."""

    def __init__(self, url: str, collection: str = "default") -> None:
        from workers.queue_harness import Database

        self.db = Database(url)
        self.collection = collection

    def _id(self) -> int | None:
        found = self.db.rows("SELECT id FROM collections WHERE name = %s", self.collection) \
            if self.db.rows("SELECT to_regclass('collections')")[0][0] is not None else []
        return int(found[0][0]) if found else None

    def generation(self) -> int:
        found = self.db.rows("SELECT generation FROM collections WHERE name = %s", self.collection) \
            if self._id() is not None else []
        return int(found[0][0]) if found else 0

    def writing(self) -> bool:
        # Another client's transaction whose latest statement is one of the store's writes.
        return bool(self.db.rows(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND xact_start IS NOT NULL AND query ILIKE ANY(%s)", list(_PG_WRITES))[0][0])

    def rows(self) -> dict[int, RawRows]:
        from citerag.index.pg_bm25 import postings_by_document

        cid = self._id()
        counts: dict[int, list[int]] = {}
        for column, sql in enumerate((
                "SELECT document_id, count(*) FROM chunks WHERE collection_id = %s GROUP BY 1",
                f"SELECT document_id, count(*) FROM chunk_vectors WHERE collection_id = %s AND dim = {DIM} GROUP BY 1",
                "SELECT document_id, count(*) FROM lexical_chunks WHERE collection_id = %s GROUP BY 1")):
            for doc, n in self.db.rows(sql, cid):
                counts.setdefault(int(doc), [0, 0, 0, 0])[column] = int(n)
        # The live postings per document in the BM25 segments; -1: postings at a position of no live chunk
        # (nor a removed one), which a whole document never leaves.
        for doc, n in (postings_by_document(self.db.conn, cid).items() if cid is not None else ()):
            counts.setdefault(int(doc), [0, 0, 0, 0])[3] = int(n)
        return {d: RawRows(*c) for d, c in counts.items()}

    def log(self) -> ChangeLog:
        cid = self._id()
        newest, entries = self.db.rows("SELECT coalesce(max(generation), 0), count(*) FROM changes"
                                       " WHERE collection_id = %s", cid)[0]
        return ChangeLog(self.generation(), int(newest), int(entries), 0, None)

    def commits(self) -> dict[int, int]:
        return {int(d): int(n) for d, n in self.db.rows(
            "SELECT document_id, count(*) FROM changes WHERE collection_id = %s GROUP BY 1", self._id())}

    def close(self) -> None:
        self.db.close()


# The check: what a fresh reader sees.

@dataclass
class Observed:
    """One check after a kill: where every document stood."""

    trial: str
    visible: int = 0  # served whole
    pending: int = 0  # registered, no version committed yet: invisible
    behind: int = 0  # served whole at an older version than its newest (a replacement not committed yet)
    absent: int = 0  # not registered yet (the CLI had not reached it, or the upload had not been taken in)
    generation: int = 0
    mode: str = ""  # how the kill was aimed: "timed" or "transaction"
    writing: bool = False  # a write transaction was seen open just before the kill
    step: int = 0  # commits the trial waited for before aiming the kill
    landed: bool = True  # the process was still running when the kill was sent

    @property
    def mid_write(self) -> bool:
        """The kill landed in work: a write transaction open, a document registered but not indexed, or a newer
        version handed over but not committed."""
        return bool(self.writing or self.pending or self.behind)


class Checker:
    """Checks a store after a kill, with a fresh reader each time; remembers what was served, so that a document
    once served can never disappear or go back to an older version."""

    def __init__(self, label: str, seed: int, settings: Settings, corpus: Corpus, key: Callable[[str], str],
                 rows: StoreRows, encoder: Any) -> None:
        self.label, self.seed, self.settings, self.corpus = label, seed, settings, corpus
        self.key, self.raw, self.encoder = key, rows, encoder
        self.served: dict[str, int] = {}  # name -> newest version number served so far
        self.registered: set[str] = set()  # names that had a document row (an accepted upload must keep it)
        self.logs: Callable[[], str] = lambda: ""  # the entry point's output, for a failure's message

    @contextmanager
    def reader(self) -> Iterator[Citerag]:
        app = Citerag()
        app.register_encoder(self.encoder)  # the real MiniLM, loaded once per test session
        app.open_collection(self.settings)
        try:
            yield app
        finally:
            app.close()

    def check(self, trial: str, final: bool = False) -> Observed:
        problems: list[str] = []
        observed = Observed(trial)
        with self.reader() as app:
            self._check(app, observed, problems, final)
        if problems:
            shown = "\n  ".join(problems[:40])
            more = f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else ""
            raise CrashViolation(f"{self.label}, trial {trial}, seed {self.seed}: {len(problems)} violation(s)\n  "
                                 f"{shown}{more}\n--- entry point output (tail)\n{self.logs()[-3000:]}")
        return observed

    def _check(self, app: Citerag, observed: Observed, problems: list[str], final: bool) -> None:
        collection = app.collection()
        store = collection.store
        model = self.settings.embedding_model
        by_key = {self.key(n): n for n in self.corpus.names}
        docs = store.documents()
        snap = store.snapshot(model)
        raw = self.raw.rows()
        log = self.raw.log()
        observed.generation = snap.generation

        # The store's generation, its change log and the saved search index agree.
        if not (log.generation == snap.generation == log.newest and log.entries == log.generation - log.start):
            problems.append(f"store generation {log.generation} (snapshot {snap.generation}) vs change log: "
                            f"newest {log.newest}, {log.entries} entries after {log.start}")
        if log.saved_index is not None and log.saved_index > log.generation:
            problems.append(f"the saved search index claims generation {log.saved_index}, the store is at "
                            f"{log.generation}")

        seen_names: set[str] = set()
        chunks_of: dict[int, list[Any]] = {}
        for row, chunk in enumerate(snap.chunks):
            chunks_of.setdefault(chunk.document_id, []).append((row, chunk))
        for doc in docs:
            name = by_key.get(doc.source_path)
            if name is None:
                problems.append(f"document {doc.id} {doc.source_path!r} is no document of the folder")
                continue
            if name in seen_names:
                problems.append(f"{name}: a second document row ({doc.id})")
            seen_names.add(name)
            what = f"{name} (document {doc.id}, {doc.status})"
            counts = raw.pop(doc.id, RawRows())
            if doc.status == "failed" or doc.error:
                problems.append(f"{what}: failed or flagged: {doc.error}")
            if doc.status != "indexed":
                observed.pending += 1
                if doc.id in snap.documents or doc.id in chunks_of:
                    problems.append(f"{what}: not indexed, yet in the search snapshot")
                if counts != RawRows():
                    problems.append(f"{what}: not indexed, yet rows remain: {counts}")
                if name in self.served:
                    problems.append(f"{what}: LOST: version {self.served[name]} was served, now invisible")
                continue
            if doc.id not in snap.documents:
                problems.append(f"{what}: indexed but missing from the search snapshot")
                continue
            self._check_served(name, what, doc, snap, chunks_of.get(doc.id, []), counts, observed, problems)
        for doc_id, counts in raw.items():
            problems.append(f"rows of no document row: document id {doc_id}: {counts}")
        for name in self.corpus.names:
            if name not in seen_names:
                observed.absent += 1
                if name in self.served:
                    problems.append(f"{name}: LOST: version {self.served[name]} was served, now no row at all")
                elif name in self.registered:
                    problems.append(f"{name}: LOST: it was registered (accepted), now no row at all")
        self.registered |= seen_names
        if final:
            for name in self.corpus.names:
                if self.served.get(name) != self.corpus.latest(name).number:
                    problems.append(f"{name}: after the run to completion serves version {self.served.get(name)}, "
                                    f"not its newest ({self.corpus.latest(name).number})")
            self._check_commits(docs, by_key, problems)
        # A reader that fails is as much a violation as one that sees half a document: say so, with the rest.
        for step in (self._check_indexes, self._check_search):
            try:
                step(app, snap, problems)
            except Exception as exc:  # noqa: BLE001 - reported with the other problems
                problems.append(f"{step.__name__.lstrip('_')} raised {type(exc).__name__}: {exc}")

    def _check_served(self, name: str, what: str, doc: Any, snap: Any, chunks: list[Any], counts: RawRows,
                      observed: Observed, problems: list[str]) -> None:
        text = snap.texts.get(doc.id)
        version = self.corpus.version_of(name, text) if text is not None else None
        if version is None:
            problems.append(f"{what}: HALF-VISIBLE: its canonical text ({None if text is None else len(text)} "
                            f"chars) is none of its {len(self.corpus.versions[name])} versions")
            return
        observed.visible += 1
        if version.number < self.corpus.latest(name).number:
            observed.behind += 1
        before = self.served.get(name, -1)
        if version.number < before:
            problems.append(f"{what}: serves version {version.number} after version {before} was served")
        self.served[name] = max(before, version.number)
        if doc.sha256 != version.sha256:
            problems.append(f"{what}: its hash names other bytes than version {version.number} it serves")
        stored = [(c.start, c.end, c.text) for _, c in chunks]
        if stored != list(version.chunks):
            differ = next((i for i, (a, b) in enumerate(zip(stored, version.chunks, strict=False)) if a != b),
                          min(len(stored), len(version.chunks)))
            problems.append(f"{what}: HALF-VISIBLE: {len(stored)} chunks stored, version {version.number} has "
                            f"{len(version.chunks)}; they differ from chunk {differ}")
        if [c.ordinal for _, c in chunks] != list(range(len(chunks))) or doc.chunk_count != len(chunks):
            problems.append(f"{what}: chunk_count {doc.chunk_count}, ordinals {[c.ordinal for _, c in chunks]}")
        for _, c in chunks:
            if text[c.start:c.end] != c.content or not c.content.strip():
                problems.append(f"{what}: chunk {c.id}'s content is not its text's [{c.start}:{c.end}]")
                break
        rows = [r for r, _ in chunks]
        if rows:
            norms = np.linalg.norm(snap.vectors[rows], axis=1)
            if not np.allclose(norms, 1.0, atol=UNIT_TOLERANCE):
                problems.append(f"{what}: vectors not unit length: {norms.min():.4f}..{norms.max():.4f}")
        expected = RawRows(len(version.chunks), len(version.chunks), len(version.chunks), version.postings)
        if counts != expected:
            problems.append(f"{what}: raw rows {counts}, a whole version {version.number} has {expected}")

    def _check_commits(self, docs: list[Any], by_key: dict[str, str], problems: list[str]) -> None:
        """Indexed exactly once: one commit to register a document and at most one per version (a version
        committed again after a kill would be a second)."""
        commits = self.raw.commits()
        for doc in docs:
            name = by_key[doc.source_path]
            most = 1 + len(self.corpus.versions[name])
            if commits.get(doc.id, 0) > most:
                problems.append(f"{name}: {commits[doc.id]} commits, at most {most} for "
                                f"{len(self.corpus.versions[name])} version(s)")

    def _check_indexes(self, app: Citerag, snap: Any, problems: list[str]) -> None:
        """The search indexes a fresh process opens hold every served chunk's vector and nothing else."""
        collection = app.collection()
        with collection.store.view() as view, collection.search_backend.open(view) as pair:
            if view.generation != snap.generation:
                problems.append(f"view generation {view.generation} != snapshot's {snap.generation}")
            total = len(snap.chunks)
            vector_rows = len(pair.vector) if pair.vector is not None else 0
            if vector_rows != total or len(pair.lexical) != total or pair.empty != (total == 0):
                problems.append(f"search indexes hold {vector_rows} vectors and {len(pair.lexical)} lexical rows "
                                f"(empty={pair.empty}); the snapshot serves {total} chunks")
                return
            if pair.vector is None:
                return
            start = 0
            while start < total:  # one query per document: its first chunk's vector against all its chunks
                doc_id = snap.chunks[start].document_id
                end = start
                while end < total and snap.chunks[end].document_id == doc_id:
                    end += 1
                ids = np.array([c.id for c in snap.chunks[start:end]], dtype=np.int64)
                want = snap.vectors[start:end] @ snap.vectors[start]
                try:
                    got = pair.vector.similarity(snap.vectors[start], ids)
                except KeyError as exc:
                    problems.append(f"document {doc_id}: chunks missing from the vector index: {exc}")
                else:
                    if not np.allclose(got, want, atol=1e-4):
                        problems.append(f"document {doc_id}: the vector index holds other vectors than the store")
                start = end

    def _check_search(self, app: Citerag, snap: Any, problems: list[str]) -> None:
        """Searches and a question through the facade cite only served documents, quoting their served text."""
        served = set(snap.documents)
        queries = [*QUERIES, *self.corpus.markers[-2:]]  # the newest versions' own words, for BM25 too
        if not served:
            try:
                app.search(QUERIES[0], SearchOptions(k=10))
            except EmptyCollection:
                return
            problems.append("a search found something with no document served")
            return
        for query in queries:
            for mode in ("dense", "bm25", "hybrid"):
                result = app.search(query, SearchOptions(mode=mode, k=10))
                for hit, citation in zip(result.hits, result.citations, strict=True):
                    self._cited(f"search {mode} {query!r}", hit.document.id, citation, snap, served, problems)
        answer = app.ask(ASK, AskOptions(threshold=2.0))
        for citation in answer.citations:
            self._cited(f"ask {ASK!r}", citation.document_id, citation, snap, served, problems)

    @staticmethod
    def _cited(what: str, doc_id: int, citation: Any, snap: Any, served: set[int], problems: list[str]) -> None:
        if doc_id not in served:
            problems.append(f"{what}: cites document {doc_id}, which is not served")
        elif snap.texts[doc_id][citation.start:citation.end] != citation.quote:
            problems.append(f"{what}: quote of document {doc_id} [{citation.start}:{citation.end}] is not its text")


# The entry points, each a real process killed with SIGKILL.

PYTHON_CLI = [sys.executable, "-m", "citerag.cli"]


def spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([*PYTHON_CLI, *args], stdout=out, stderr=out, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def kill(process: subprocess.Popen[bytes] | None, output: Callable[[], str] = lambda: "") -> None:
    """SIGKILL the entry point itself (never a process it did not start); one that ended on its own must have
    ended well."""
    if process is None:
        return
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(30)
    elif process.returncode != 0:
        raise AssertionError(f"the entry point exited {process.returncode} on its own\n{output()[-3000:]}")


def wait_until(what: str, ready: Callable[[], bool], timeout: float, every: float = 0.05,
               output: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{output()[-3000:]}")
        time.sleep(every)


IDLE_S = 10.0  # a queue with nothing queued or running for this long, documents still behind: work was lost


def settle(behind: Callable[[], tuple[list[str], bool]], output: Callable[[], str], timeout: float = 600) -> None:
    """Wait until every document is at its newest version; fail early when the queue went idle short of that (a
    version accepted and then lost would otherwise only show as a timeout)."""
    deadline = time.monotonic() + timeout
    idle_since: float | None = None
    while True:
        names, busy = behind()
        if not names:
            return
        now = time.monotonic()
        idle_since = None if busy else idle_since if idle_since is not None else now
        if idle_since is not None and now - idle_since > IDLE_S:
            raise CrashViolation(f"LOST: nothing queued or running for {IDLE_S:g}s, yet {len(names)} document(s) "
                                 f"are not at their newest version: {names[:20]}\n{output()[-3000:]}")
        if now > deadline:
            raise AssertionError(f"timed out after {timeout:g}s: {len(names)} document(s) not at their newest "
                                 f"version: {names[:20]}\n{output()[-3000:]}")
        time.sleep(0.5)


class Entry(Protocol):
    """An ingestion entry point as the chain drives it."""

    name: str

    def key(self, name: str) -> str:
        """The store key (source path) of a folder document."""
        ...

    def start(self) -> None:
        """Start the process on the work left (the service: also hand it the new versions)."""
        ...

    def alive(self) -> bool: ...

    def kill(self) -> None: ...

    def replaced(self, names: list[str]) -> None:
        """These documents were given a new version in the corpus: hand it over (now or at the next start)."""
        ...

    def finish(self) -> None:
        """Run to completion: every document indexed at its newest version."""
        ...

    def nothing_left(self) -> list[str]:
        """Another run finds nothing to do: the violations if it does."""
        ...

    def output(self) -> str: ...

    def close(self) -> None: ...


class CliEntry:
    """`citerag ingest FOLDER --index HOME`."""

    name = "cli"

    def __init__(self, home: Path, corpus: Corpus, logs: Path) -> None:
        self.home, self.corpus, self.log = home, corpus, logs / "cli.log"
        self.process: subprocess.Popen[bytes] | None = None

    def key(self, name: str) -> str:
        return str((self.corpus.folder / name).resolve())

    def _args(self) -> list[str]:
        return ["ingest", str(self.corpus.folder), "--index", str(self.home)]

    def start(self) -> None:
        self.process = spawn(self._args(), self.log)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        kill(self.process, self.output)

    def replaced(self, names: list[str]) -> None:
        pass  # the corpus rewrote the files: the next run reads them

    def finish(self) -> None:
        self.start()
        assert self.process is not None
        code = self.process.wait(600)
        assert code == 0, f"the run to completion exited {code}\n{self.output()[-3000:]}"

    def nothing_left(self) -> list[str]:
        done = subprocess.run([*PYTHON_CLI, *self._args(), "--json"], capture_output=True, text=True, timeout=300)
        if done.returncode:
            return [f"another ingest exited {done.returncode}: {done.stderr[-2000:]}"]
        report = json.loads(done.stdout)
        if report["indexed"] or report["failed"] or report["removed"] or report["unchanged"] != DOCUMENTS:
            return [f"another ingest did work: indexed {report['indexed']}, failed {report['failed']}, removed "
                    f"{report['removed']}, unchanged {report['unchanged']} of {DOCUMENTS}"]
        return []

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def close(self) -> None:
        if self.alive():
            kill(self.process)


DOCS = "/v1/collections/default/documents"


class ServiceEntry:
    """`citerag serve` on loopback: the folder uploaded over HTTP in one request (the first kill lands while it is
    being taken in; the client then sends it again), new versions PUT; its thread queue indexes them, and on restart
    queues again what a kill left."""

    name = "service"

    def __init__(self, home: Path, corpus: Corpus, logs: Path) -> None:
        self.home, self.corpus, self.log = home, corpus, logs / "serve.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.client: httpx.Client | None = None
        self.ids: dict[str, int] = {}
        self.to_put: list[str] = []
        self.uploads = 0  # upload requests sent
        self._uploading: threading.Thread | None = None

    def key(self, name: str) -> str:
        from citerag.types import UPLOAD_SCHEME

        return UPLOAD_SCHEME + name

    def _upload(self, base_url: str) -> None:
        """The whole folder in one request; `ids` once it was answered (a kill meanwhile leaves them unset)."""
        self.uploads += 1
        assert all(len(self.corpus.versions[n]) == 1 for n in self.corpus.names)  # no new version before this
        files = [("files", (n, self.corpus.latest(n).data, "text/markdown")) for n in self.corpus.names]
        try:
            with httpx.Client(base_url=base_url, timeout=120) as client:
                response = client.post(DOCS, files=files)
        except httpx.TransportError:
            return  # killed while it was being taken in
        assert response.status_code == 202, response.text
        self.ids = {d["name"]: d["id"] for d in response.json()["documents"]}

    def _serve(self) -> httpx.Client:
        port = free_port()
        self.process = spawn(["serve", "--index", str(self.home), "--no-keys", "--port", str(port)], self.log)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120)

        def up() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"citerag serve exited {self.process.returncode}\n{self.output()[-3000:]}")
            try:
                return client.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_until("citerag serve to answer", up, 120, 0.1, self.output)
        self.client = client
        return client

    def start(self) -> None:
        client = self._serve()
        if not self.ids and not self.uploads:
            # The first upload runs beside the chain, so that the first kill lands while it is being taken in.
            self._uploading = threading.Thread(target=self._upload, args=(str(client.base_url),), daemon=True)
            self._uploading.start()
        elif not self.ids:
            self._upload(str(client.base_url))  # sent again: what was accepted answers existed: true
            assert self.ids, "the upload was not answered"
        for name in self.to_put:
            response = client.put(f"{DOCS}/{self.ids[name]}",
                                  files={"file": (name, self.corpus.latest(name).data, "text/markdown")})
            assert response.status_code == 202, response.text
        self.to_put = []

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        kill(self.process, self.output)
        if self._uploading is not None:
            self._uploading.join(60)
            self._uploading = None
        if self.client is not None:
            self.client.close()
            self.client = None

    def replaced(self, names: list[str]) -> None:
        self.to_put.extend(n for n in names if n not in self.to_put)

    def _documents(self) -> list[dict[str, Any]]:
        assert self.client is not None
        response = self.client.get(DOCS)
        assert response.status_code == 200, response.text
        return list(response.json()["documents"])

    def behind(self) -> tuple[list[str], bool]:
        """Documents not yet indexed at their newest version, and whether any job is still queued or running."""
        if self._uploading is not None and self._uploading.is_alive():
            return ["(the upload is still being answered)"], True
        latest = {n: self.corpus.latest(n).sha256 for n in self.corpus.names}
        docs = self._documents()
        behind = [d["name"] for d in docs if d["status"] != "indexed" or d["sha256"] != latest[d["name"]]]
        behind += sorted(set(latest) - {d["name"] for d in docs})
        return behind, any(d["job"] is not None for d in docs)

    def stop(self) -> None:
        """A graceful stop (SIGTERM): the queue's thread finishes its job."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(60)
        if self.client is not None:
            self.client.close()
            self.client = None

    def finish(self) -> None:
        self.start()
        settle(self.behind, self.output)
        self.stop()

    def nothing_left(self) -> list[str]:
        client = self._serve()
        try:
            time.sleep(1.0)  # what a restart queues again would start now
            problems = [f"{d['name']}: {d['status']}, job {d['job']} after a restart" for d in self._documents()
                        if d["status"] != "indexed" or d["job"] is not None]
            files = [("files", (n, self.corpus.latest(n).data, "text/markdown")) for n in self.corpus.names]
            response = client.post(DOCS, files=files)
            assert response.status_code == 202, response.text
            problems += [f"{d['name']}: uploading its newest version again was new work" for d in
                         response.json()["documents"] if not d["existed"]]
            return problems
        finally:
            self.stop()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def close(self) -> None:
        if self.alive():
            kill(self.process)
        if self.client is not None:
            self.client.close()


class WorkerEntry:
    """`citerag worker` on the procrastinate queue: the folder submitted as the API submits uploads (one job per
    document in the store's database), new versions as the API submits a PUT."""

    name = "worker"

    def __init__(self, home: Path, corpus: Corpus, logs: Path, settings: Settings) -> None:
        self.home, self.corpus, self.logs, self.settings = home, corpus, logs, settings
        self.worker: Any = None
        self.started = 0
        self.submitted = False
        self.to_submit: list[str] = []

    def key(self, name: str) -> str:
        from citerag.types import UPLOAD_SCHEME

        return UPLOAD_SCHEME + name

    def _submit(self, names: list[str]) -> None:
        from workers.queue_harness import submit

        submit(self.settings, [(n, self.corpus.latest(n).data) for n in names])

    def start(self) -> None:
        from workers.queue_harness import Worker

        if not self.submitted:
            self._submit(self.corpus.names)
            self.submitted = True
        self.started += 1
        self.worker = Worker(self.home, self.logs / f"worker-{self.started}.log").start()

    def alive(self) -> bool:
        return self.worker is not None and bool(self.worker.alive())

    def kill(self) -> None:
        if self.worker is not None:
            kill(self.worker.process, self.output)

    def replaced(self, names: list[str]) -> None:
        self._submit(names)  # the jobs wait in the database for the next worker, as a PUT's would

    def _jobs(self) -> list[dict[str, Any]]:
        from workers.queue_harness import database

        with database(self.settings.store_url) as db:
            return db.jobs()

    def behind(self) -> tuple[list[str], bool]:
        from workers.queue_harness import database

        with database(self.settings.store_url) as db:
            docs = {r[0]: (r[1], r[2]) for r in db.rows("SELECT source_path, status, sha256 FROM documents")}
            jobs = db.jobs()
        behind = [n for n in self.corpus.names if docs.get(self.key(n)) != ("indexed", self.corpus.latest(n).sha256)]
        return behind, any(j["status"] not in ("succeeded", "failed") for j in jobs)

    def finish(self) -> None:
        self.start()
        # A killed worker's job goes back to the queue once its heartbeat is a lease old.
        settle(self.behind, self.output)
        assert self.worker.stop() == 0, self.output()[-3000:]

    def nothing_left(self) -> list[str]:
        return [f"job {j['id']} ({j['args'].get('name')}): {j['status']} after {j['attempts']} attempt(s)"
                for j in self._jobs() if j["status"] != "succeeded"]

    def output(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')}"
                         for p in sorted(self.logs.glob("worker-*.log")))

    def close(self) -> None:
        if self.worker is not None and self.alive():
            self.worker.kill()


# The chain.

@dataclass
class ChainFigures:
    """What one chain measured: one Observed per kill, and the run to completion."""

    backend: str
    entry: str
    seed: int
    trials: list[Observed] = field(default_factory=list)
    seconds: float = 0.0
    finish_seconds: float = 0.0  # the run to completion
    final: Observed | None = None

    def summary(self) -> str:
        """The chain's figures; "0 lost, 0 half-visible" because any violation fails the chain before this."""
        kills = len(self.trials)
        mid = sum(o.mid_write for o in self.trials)
        writing = sum(o.writing for o in self.trials)
        after = sum(not o.landed for o in self.trials)
        aimed = sum(o.mode == "transaction" for o in self.trials)
        return (f"{self.backend}/{self.entry} seed {self.seed}: {kills} kills, {mid} mid-write: {writing} inside an "
                f"open write transaction ({aimed} aimed at one), {sum(o.pending > 0 for o in self.trials)} leaving "
                f"documents pending, {sum(o.behind > 0 for o in self.trials)} leaving a replaced document at its "
                f"previous version (pending {sum(o.pending for o in self.trials)}, previous version "
                f"{sum(o.behind for o in self.trials)}, over all kills), {after} after the process had finished, "
                f"0 lost, 0 half-visible; final: {self.final.visible if self.final else 0} of {DOCUMENTS} served "
                f"at their newest version; {self.seconds:.0f}s ({self.finish_seconds:.0f}s the run to completion)")


def chain_seed(seed: int, backend: str, entry: str) -> int:
    """Each chain's own seed, derived from the printed one (reproducible per chain)."""
    return int(hashlib.sha256(f"{seed}:{backend}:{entry}".encode()).hexdigest()[:8], 16)


def run_chain(backend: str, entry: Entry, checker: Checker, rows: StoreRows, corpus: Corpus, trials: int,
              seed: int) -> ChainFigures:
    """`trials` kills of `entry`, each checked; then the run to completion, checked, and a run with nothing to do."""
    rng = random.Random(chain_seed(seed, backend, entry.name))
    figures = ChainFigures(backend, entry.name, seed)
    checker.logs = entry.output
    started = time.monotonic()
    left = DOCUMENTS  # documents with work to do, as of the last check
    replaced = False  # the previous trial gave documents new versions
    try:
        for trial in range(1, trials + 1):
            entry.start()
            base = rows.generation()
            # Commits to let through before aiming: spread so that every trial still finds work in flight; right
            # after new versions were handed over, among the first few, while they are likely being indexed.
            step = rng.randint(1, max(1, min(REPLACED, left - 1))) if replaced else \
                rng.randint(1, max(1, min(left - 1, 2 * left // (trials - trial + 2))))
            mode = rng.choice(("timed", "transaction"))
            delay = rng.uniform(0.0, MAX_DELAY_S)
            target = base + step
            wait_until(f"{step} commit(s) by the {entry.name}",
                       lambda: rows.generation() >= target or not entry.alive(),  # noqa: B023 - called at once
                       300, 0.02, entry.output)
            if not entry.alive():
                raise AssertionError(f"{backend}/{entry.name} trial {trial}: the entry point ended before its kill "
                                     f"\n{entry.output()[-3000:]}")
            writing = False
            if mode == "timed":
                time.sleep(delay)
                writing = rows.writing()
            else:
                deadline = time.monotonic() + TRANSACTION_WAIT_S
                while not (writing := rows.writing()) and time.monotonic() < deadline and entry.alive():
                    time.sleep(0.001)
            landed = entry.alive()  # False: it finished the work during the delay (a kill after the end)
            entry.kill()
            killed = time.monotonic()
            observed = checker.check(str(trial))
            observed.mode, observed.writing, observed.step, observed.landed = mode, writing, step, landed
            figures.trials.append(observed)
            left = observed.pending + observed.behind + observed.absent
            print(f"  {backend}/{entry.name} trial {trial}: {mode} kill after {step} commit(s)"
                  f"{'' if mode != 'timed' else f' + {delay:.2f}s'}, writing={writing}: {observed.visible} served, "
                  f"{observed.pending} pending, {observed.behind} behind, {observed.absent} not yet registered, "
                  f"generation {observed.generation}; checked in {time.monotonic() - killed:.1f}s", flush=True)
            replaced = trial % REPLACE_EVERY == 0 or trial == trials
            if replaced:
                # Mostly documents already served, so that their previous version has to stay served meanwhile.
                served = sorted(checker.served)
                pool = served if len(served) >= REPLACED else corpus.names
                names = sorted(rng.sample(pool, REPLACED))
                for name in names:
                    corpus.replace(name, trial)
                entry.replaced(names)
                left = min(DOCUMENTS, left + REPLACED)
        finishing = time.monotonic()
        entry.finish()
        figures.finish_seconds = time.monotonic() - finishing
        figures.final = checker.check("final", final=True)
        problems = entry.nothing_left()
        if problems:
            raise CrashViolation(f"{backend}/{entry.name}, seed {seed}: the run after completion had work left:\n  "
                                 + "\n  ".join(problems[:40]))
        final = checker.check("after nothing-left", final=True)
        if final.generation != figures.final.generation:
            raise CrashViolation(f"{backend}/{entry.name}, seed {seed}: a run with nothing to do changed the store "
                                 f"(generation {figures.final.generation} -> {final.generation})")
    finally:
        entry.close()
        figures.seconds = time.monotonic() - started
    return figures


def pg_home(folder: Path, pg_url: str, **extra: Any) -> Settings:
    """A PostgreSQL home (config.toml naming the store): the queue tests' make_home."""
    from workers.queue_harness import make_home

    return make_home(folder, pg_url, **extra)


def sqlite_home(folder: Path) -> Settings:
    folder.mkdir(parents=True, exist_ok=True)
    return load_settings(folder)
