-- citerag's PostgreSQL schema, version 1. Applied by citerag.store.pg_migrate in one transaction; never edit a
-- released file, add the next number. Every table that holds a collection's data carries collection_id, and
-- every query names it: one database serves many collections (teams) without one seeing another's rows.
CREATE EXTENSION IF NOT EXISTS vector;

-- A collection: its name, the settings a client gave it (the catalog), and its store generation, bumped in the
-- same transaction as every change to its documents (caches and readers key on it).
CREATE TABLE collections (
    id SERIAL PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    settings JSONB NOT NULL DEFAULT '{}',
    generation BIGINT NOT NULL DEFAULT 0,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE documents (
    id BIGSERIAL PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    source_path TEXT NOT NULL,
    name TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    sha256 TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'indexed', 'failed')),
    error TEXT,
    warnings JSONB NOT NULL DEFAULT '[]',
    chunk_count INTEGER NOT NULL DEFAULT 0,
    stamps JSONB NOT NULL DEFAULT '{}',
    canonical_text TEXT,
    locators JSONB NOT NULL DEFAULT '[]',
    updated_at TEXT NOT NULL,
    UNIQUE (collection_id, source_path)
);

-- Chunk ids come from a sequence, never reused: the search tables key rows by chunk id.
CREATE SEQUENCE chunk_ids;
CREATE TABLE chunks (
    id BIGINT PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    document_id BIGINT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    text TEXT NOT NULL,
    content TEXT NOT NULL,
    section TEXT NOT NULL,
    start_offset INTEGER NOT NULL,
    end_offset INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    header_tokens INTEGER NOT NULL
);
CREATE INDEX chunks_by_document ON chunks (collection_id, document_id, ordinal);

-- The change log: the document each generation changed.
CREATE TABLE changes (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    generation BIGINT NOT NULL,
    document_id BIGINT NOT NULL,
    PRIMARY KEY (collection_id, generation)
);

-- The vector index (citerag.index.pgvector): one unit vector per chunk, by embedding model. No foreign key to
-- chunks: the index is written in the store's transaction, and its contract tests use it on its own. HNSW
-- indexes are partial per dimension (`WHERE dim = N`, on `embedding::vector(N)`), created when a dimension is
-- first written, so that encoders of different sizes share the table.
CREATE TABLE chunk_vectors (
    collection_id INTEGER NOT NULL,
    chunk_id BIGINT NOT NULL,
    document_id BIGINT NOT NULL,
    model TEXT NOT NULL,
    dim INTEGER NOT NULL,
    embedding vector NOT NULL,
    PRIMARY KEY (collection_id, chunk_id)
);
CREATE INDEX chunk_vectors_by_document ON chunk_vectors (collection_id, document_id);

-- The lexical index (citerag.index.pg_bm25): each chunk's length in reference tokens, and its postings.
-- N, document frequencies and the mean length are computed per query over the live rows, as in the embedded
-- index, so scores equal the reference formula after any sequence of updates.
CREATE TABLE lexical_chunks (
    collection_id INTEGER NOT NULL,
    chunk_id BIGINT NOT NULL,
    document_id BIGINT NOT NULL,
    model TEXT NOT NULL,
    length INTEGER NOT NULL,
    PRIMARY KEY (collection_id, chunk_id)
);
CREATE INDEX lexical_chunks_by_document ON lexical_chunks (collection_id, document_id);
CREATE TABLE postings (
    collection_id INTEGER NOT NULL,
    term TEXT NOT NULL,
    chunk_id BIGINT NOT NULL,
    tf INTEGER NOT NULL,
    PRIMARY KEY (collection_id, term, chunk_id)
);
CREATE INDEX postings_by_chunk ON postings (collection_id, chunk_id);

-- Uploaded originals, content-addressed per collection, so that any worker on any machine can index them and any
-- API process can serve them.
CREATE TABLE originals (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    sha256 TEXT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (collection_id, sha256)
);

-- API keys (citerag.service.keys): only the SHA-256 of each key is kept. `collection` is a name, not an id: a
-- server admin key has none.
CREATE TABLE api_keys (
    prefix TEXT PRIMARY KEY,
    digest TEXT NOT NULL,
    collection TEXT,
    scope TEXT NOT NULL,
    created_at TEXT NOT NULL
);

-- Recent traces per collection (citerag.trace), the newest trace_keep kept.
CREATE TABLE traces (
    seq BIGSERIAL PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    trace_id TEXT NOT NULL,
    operation TEXT NOT NULL,
    started DOUBLE PRECISION NOT NULL,
    record JSONB NOT NULL,
    UNIQUE (collection_id, trace_id)
);
