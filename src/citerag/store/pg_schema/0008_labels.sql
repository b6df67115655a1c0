-- citerag's PostgreSQL schema, version 8: production questions labelled for evaluation (citerag.app.labels), one
-- per trace, kept with their collection (deleted with it), not with the traces they came from (those are pruned).
CREATE TABLE labels (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    trace_id TEXT NOT NULL,
    question TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('needle', 'ood')),
    document_id BIGINT,
    char_start INTEGER,
    char_end INTEGER,
    needle TEXT NOT NULL,
    labelled_by TEXT NOT NULL,
    asked_at DOUBLE PRECISION NOT NULL,
    labelled_at TEXT NOT NULL,
    PRIMARY KEY (collection_id, trace_id)
);
