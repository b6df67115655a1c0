-- citerag's PostgreSQL schema, version 7: feedback on answers (citerag.app.feedback), kept with the answer's trace
-- and dropped with it (when the trace store prunes it, or with its collection).
CREATE TABLE feedback (
    seq BIGSERIAL PRIMARY KEY,
    collection_id INTEGER NOT NULL,
    trace_id TEXT NOT NULL,
    record JSONB NOT NULL,
    FOREIGN KEY (collection_id, trace_id) REFERENCES traces (collection_id, trace_id) ON DELETE CASCADE
);
CREATE INDEX feedback_by_trace ON feedback (collection_id, trace_id);
