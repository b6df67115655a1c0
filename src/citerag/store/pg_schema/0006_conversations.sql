-- citerag's PostgreSQL schema, version 6: conversations and their turns (citerag.store.conversations), kept with
-- their collection (deleted with it) and outside its generation: asking changes no document.
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    owner TEXT NOT NULL,
    title TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX conversations_by_owner ON conversations (collection_id, owner, updated_at);

CREATE TABLE turns (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    n INTEGER NOT NULL,
    question TEXT NOT NULL,
    query TEXT NOT NULL,
    answer TEXT NOT NULL,
    refused BOOLEAN NOT NULL,
    citations JSONB NOT NULL,
    trace_id TEXT,
    created_at TEXT NOT NULL,
    PRIMARY KEY (conversation_id, n)
);
