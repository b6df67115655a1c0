"""The embedded store's schema: what a new index gets, the numbered steps that bring an older one to it, and
reading which version a file is at. Applied by SqliteStore inside one write transaction (all or nothing)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from citerag.errors import CiteragError

DB_NAME = "index.sqlite3"
SCHEMA_VERSION = 10

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
    updated_at TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    read_groups TEXT NOT NULL DEFAULT '[]'
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


# Conversations (citerag.store.conversations): kept with the collection, outside its generation.
_CONVERSATIONS = (
    """CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY, owner TEXT NOT NULL, title TEXT NOT NULL,
        created_at TEXT NOT NULL, updated_at TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS conversations_by_owner ON conversations (owner, updated_at)",
    """CREATE TABLE IF NOT EXISTS turns (
        conversation_id TEXT NOT NULL, n INTEGER NOT NULL, question TEXT NOT NULL, query TEXT NOT NULL,
        answer TEXT NOT NULL, refused INTEGER NOT NULL, citations TEXT NOT NULL, trace_id TEXT,
        created_at TEXT NOT NULL, PRIMARY KEY (conversation_id, n))""",
)

_LABELS = """CREATE TABLE IF NOT EXISTS labels (
    trace_id TEXT PRIMARY KEY, question TEXT NOT NULL, kind TEXT NOT NULL CHECK (kind IN ('needle', 'ood')),
    document_id INTEGER, char_start INTEGER, char_end INTEGER, needle TEXT NOT NULL, labelled_by TEXT NOT NULL,
    asked_at REAL NOT NULL, labelled_at TEXT NOT NULL)"""

_EXPERIMENTS = (
    """CREATE TABLE IF NOT EXISTS experiments (
        name TEXT PRIMARY KEY, arm_a TEXT NOT NULL, arm_b TEXT NOT NULL, split REAL NOT NULL,
        sticky TEXT NOT NULL CHECK (sticky IN ('key', 'conversation')), started_at TEXT NOT NULL, stopped_at TEXT)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS experiments_one_running ON experiments ((1)) WHERE stopped_at IS NULL",
)

# Sources (citerag.store.sources): kept with the collection, outside its generation.
_SOURCES = (
    """CREATE TABLE IF NOT EXISTS sources (
        name TEXT PRIMARY KEY, kind TEXT NOT NULL, location TEXT NOT NULL, options TEXT NOT NULL, interval_s REAL,
        cron TEXT, created_at TEXT NOT NULL, status TEXT NOT NULL, lease_holder TEXT, lease_until REAL NOT NULL
        DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS source_items (
        source TEXT NOT NULL, key TEXT NOT NULL, token TEXT NOT NULL, document_id INTEGER NOT NULL,
        link TEXT NOT NULL, origin TEXT NOT NULL, PRIMARY KEY (source, key))""",
    "CREATE INDEX IF NOT EXISTS source_items_by_document ON source_items (document_id)",
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


def _add_conversations(db: sqlite3.Connection) -> None:
    for statement in _CONVERSATIONS:
        db.execute(statement)


def _add_labels(db: sqlite3.Connection) -> None:
    db.execute(_LABELS)


def _add_experiments(db: sqlite3.Connection) -> None:
    for statement in _EXPERIMENTS:
        db.execute(statement)


def _add_sources(db: sqlite3.Connection) -> None:
    for statement in _SOURCES:
        db.execute(statement)


def _add_tags(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE documents ADD COLUMN tags TEXT NOT NULL DEFAULT '[]'")


def _add_read_groups(db: sqlite3.Connection) -> None:
    db.execute("ALTER TABLE documents ADD COLUMN read_groups TEXT NOT NULL DEFAULT '[]'")


# (the version a step reaches, what it adds, the step). Steps run in order inside one write transaction,
# so an upgrade is all or nothing; never edit a released step, append a new one.
_MIGRATIONS: list[tuple[int, str, Callable[[sqlite3.Connection], None]]] = [
    (2, "documents.locators: the extractor's locator map", _add_locators),
    (3, "meta generation: bumped with every change, so readers know when their snapshot is stale", _add_generation),
    (4, "changes: the document each generation changed, so search indexes catch up per document; chunk ids "
        "from a counter, never reused", _add_change_log),
    (5, "conversations and their turns", _add_conversations),
    (6, "labels: production questions labelled for evaluation", _add_labels),
    (7, "experiments: two pipeline arms with a traffic split", _add_experiments),
    (8, "sources: folders, Git repositories and websites synced into the collection", _add_sources),
    (9, "documents.tags: what people say of a document, a search filter", _add_tags),
    (10, "documents.read_groups: the groups that may read a document (empty: everyone)", _add_read_groups),
]
assert _MIGRATIONS[-1][0] == SCHEMA_VERSION


def schema_version(db: sqlite3.Connection, path: Path) -> int | None:
    """The version the file at `path` is at, None for an empty database (no tables at all)."""
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "meta" in tables:
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None:
            try:
                return int(row[0])
            except ValueError:
                raise CiteragError(f"the index at {path.parent} has an unreadable schema version "
                                   f"{row[0]!r}") from None
    if "documents" in tables:
        # A lost marker is no proof of the current schema: read the version off what each step added.
        if "conversations" in tables:
            return 5
        if "changes" in tables:
            return 4
        if "meta" in tables and db.execute("SELECT 1 FROM meta WHERE key = 'generation'").fetchone():
            return 3
        return 2 if "locators" in _columns(db, "documents") else 1
    if tables:
        raise CiteragError(f"{path} is not a citerag index (tables: {', '.join(sorted(tables))})")
    return None


def check_upgradable(index_dir: Path, path: Path, found: int | None, create: bool) -> None:
    if found is None and not create:
        raise CiteragError(f"no index at {index_dir} ({path} is an empty database): "
                           "run `citerag ingest PATH` first")
    if found is not None and found > SCHEMA_VERSION:
        raise CiteragError(f"the index at {index_dir} has schema version {found}, this citerag knows up to "
                           f"{SCHEMA_VERSION}: upgrade citerag")


def apply(db: sqlite3.Connection, found: int | None) -> None:
    """Create the schema (`found` None) or migrate from version `found`, inside the caller's write transaction."""
    if found is None:
        for statement in (*_CREATE, *_CONVERSATIONS, _LABELS, *_EXPERIMENTS, *_SOURCES):
            db.execute(statement)
    else:
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        for version, _what, step in _MIGRATIONS:
            if version > found:
                step(db)
    db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
