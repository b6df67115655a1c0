-- citerag's PostgreSQL schema, version 13: the audit trail (citerag.audit, issue 30). One table for the whole
-- home: who did what (principal, action), in which collection (by name, not a reference: a deleted collection's
-- events stay until they are swept), under which trace, to which documents, and the caller's detail as JSON.
-- Events older than audit_retention_days are swept by the API processes that record them.
CREATE TABLE audit_events (
    seq BIGSERIAL PRIMARY KEY,
    at TIMESTAMPTZ NOT NULL,
    principal TEXT NOT NULL,
    action TEXT NOT NULL,
    collection TEXT,
    trace_id TEXT,
    documents BIGINT[] NOT NULL DEFAULT '{}',
    detail JSONB NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_events_by_collection ON audit_events (collection, at);
CREATE INDEX audit_events_by_principal ON audit_events (principal, at);
CREATE INDEX audit_events_by_at ON audit_events (at);
