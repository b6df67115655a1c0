-- citerag's PostgreSQL schema, version 11: documents.tags, what people who know a document say of it (set at
-- upload or ingest, or replaced through the API); a search filter.
ALTER TABLE documents ADD COLUMN tags JSONB NOT NULL DEFAULT '[]';
