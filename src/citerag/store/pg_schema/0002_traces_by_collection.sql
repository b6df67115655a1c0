-- citerag's PostgreSQL schema, version 2: the newest traces of one collection, in order. Every trace write
-- prunes its collection to the newest trace_keep (citerag.trace.store_postgres) by walking this index from the
-- newest end; without it each write would sort every collection's traces.
CREATE INDEX traces_by_collection ON traces (collection_id, seq);
