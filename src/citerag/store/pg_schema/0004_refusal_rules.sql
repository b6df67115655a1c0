-- citerag's PostgreSQL schema, version 4: each collection's calibrated refusal rule, one per encoder (cosine
-- distances of different encoders are not comparable), as the JSON of citerag.refusal.RefusalRule.
CREATE TABLE refusal_rules (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    encoder TEXT NOT NULL,
    rule JSONB NOT NULL,
    fitted_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (collection_id, encoder)
);
