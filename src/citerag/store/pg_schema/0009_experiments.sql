-- citerag's PostgreSQL schema, version 9: experiments, two pipeline arms with a traffic split
-- (citerag.app.experiments), kept with their collection; at most one runs at a time.
CREATE TABLE experiments (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    arm_a JSONB NOT NULL,
    arm_b JSONB NOT NULL,
    split DOUBLE PRECISION NOT NULL,
    sticky TEXT NOT NULL CHECK (sticky IN ('key', 'conversation')),
    started_at TEXT NOT NULL,
    stopped_at TEXT,
    PRIMARY KEY (collection_id, name)
);
CREATE UNIQUE INDEX experiments_one_running ON experiments (collection_id) WHERE stopped_at IS NULL;
