-- citerag's PostgreSQL schema, version 10: sources (citerag.app.sources), folders, Git repositories and websites
-- synced into a collection, with a lease per source (one sync at a time on any machine) and the version token of
-- each document a source holds; kept with their collection.
CREATE TABLE sources (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    location TEXT NOT NULL,
    options JSONB NOT NULL,
    interval_s DOUBLE PRECISION,
    cron TEXT,
    created_at TEXT NOT NULL,
    status JSONB NOT NULL,
    lease_holder TEXT,
    lease_until DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (collection_id, name)
);
CREATE TABLE source_items (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    source TEXT NOT NULL,
    key TEXT NOT NULL,
    token TEXT NOT NULL,
    document_id BIGINT NOT NULL,
    link TEXT NOT NULL,
    origin TEXT NOT NULL,
    PRIMARY KEY (collection_id, source, key)
);
CREATE INDEX source_items_by_document ON source_items (collection_id, document_id);
