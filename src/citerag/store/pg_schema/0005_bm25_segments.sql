-- citerag's PostgreSQL schema, version 5: BM25 postings as arrays in immutable segments (citerag.index.pg_bm25),
-- replacing one row per (term, chunk). A query reads each of its words' postings as one byte string per segment
-- instead of one index entry per posting: on 100,000 chunks, where a dev question's words have some 250,000
-- postings, a query took 254 ms p50 as rows and 12 ms as arrays (benchmarks/bench_pg_bm25.py), with the same
-- scores to the bit.
--
-- A segment is the chunks of one add (or of a merge of segments), positions 0.. in it; for each term it holds,
-- one bm25_terms row: the positions of the chunks holding it, their term frequencies and lengths, as big-endian
-- int4 arrays (int4send's bytes, so SQL and numpy read them alike). Segments never change: removing a chunk
-- deletes its lexical_chunks row and records its (segment, position, length) in bm25_removed, which the query
-- subtracts; a writer's merge rewrites a few segments into one without their removed chunks. N and the total
-- length come from the segments' counts less the removed rows, the document frequencies from the live
-- positions, so scores still equal the reference formula over the live chunks after any sequence of updates.
CREATE SEQUENCE bm25_segment_ids;

CREATE TABLE bm25_segments (
    collection_id INTEGER NOT NULL,
    model TEXT NOT NULL,
    segment BIGINT NOT NULL,
    chunks INTEGER NOT NULL,        -- positions, removed ones included
    length BIGINT NOT NULL,         -- their lengths' sum, removed ones included
    chunk_ids BYTEA NOT NULL,       -- int8 big-endian, by position
    PRIMARY KEY (collection_id, model, segment)
);

CREATE TABLE bm25_terms (
    collection_id INTEGER NOT NULL,
    model TEXT NOT NULL,
    term TEXT NOT NULL,
    segment BIGINT NOT NULL,
    postings INTEGER NOT NULL,      -- chunks holding the term
    data BYTEA NOT NULL,            -- int4 big-endian: their positions (ascending), then tfs, then lengths
    PRIMARY KEY (collection_id, model, term, segment)
);
CREATE INDEX bm25_terms_by_segment ON bm25_terms (collection_id, model, segment);

CREATE TABLE bm25_removed (
    collection_id INTEGER NOT NULL,
    model TEXT NOT NULL,
    segment BIGINT NOT NULL,
    position INTEGER NOT NULL,
    length INTEGER NOT NULL,
    PRIMARY KEY (collection_id, model, segment, position)
);

-- Stored as they are (out of line, uncompressed): a query reads whole arrays, and pglz would cost more to undo
-- than the bytes it saves; chunk_ids is read a few bytes at a time (substring reads only the chunks it needs).
ALTER TABLE bm25_segments ALTER chunk_ids SET STORAGE EXTERNAL;
ALTER TABLE bm25_terms ALTER data SET STORAGE EXTERNAL;

-- Where each live chunk is. Removal returns it; a merge updates it (so a removal waiting on a merge's row lock
-- finds the chunk where the merge put it), finding the rows by chunk id (bm25_segments.chunk_ids).
ALTER TABLE lexical_chunks ADD COLUMN segment BIGINT, ADD COLUMN position INTEGER;

-- The existing postings: one segment per collection and model, its chunks by id.
WITH segments AS MATERIALIZED (
    SELECT collection_id, model, nextval('bm25_segment_ids') AS segment
    FROM (SELECT DISTINCT collection_id, model FROM lexical_chunks) found
), placed AS (
    SELECT c.collection_id, c.chunk_id, s.segment,
           (row_number() OVER (PARTITION BY c.collection_id, c.model ORDER BY c.chunk_id) - 1)::integer AS position
    FROM lexical_chunks c JOIN segments s ON s.collection_id = c.collection_id AND s.model = c.model
)
UPDATE lexical_chunks l SET segment = p.segment, position = p.position
FROM placed p WHERE l.collection_id = p.collection_id AND l.chunk_id = p.chunk_id;

INSERT INTO bm25_segments (collection_id, model, segment, chunks, length, chunk_ids)
SELECT collection_id, model, segment, count(*), sum(length), string_agg(int8send(chunk_id), ''::bytea ORDER BY position)
FROM lexical_chunks GROUP BY collection_id, model, segment;

INSERT INTO bm25_terms (collection_id, model, term, segment, postings, data)
SELECT p.collection_id, l.model, p.term, l.segment, count(*),
       string_agg(int4send(l.position), ''::bytea ORDER BY l.position)
       || string_agg(int4send(p.tf), ''::bytea ORDER BY l.position)
       || string_agg(int4send(l.length), ''::bytea ORDER BY l.position)
FROM postings p JOIN lexical_chunks l ON l.collection_id = p.collection_id AND l.chunk_id = p.chunk_id
GROUP BY p.collection_id, l.model, p.term, l.segment;

ALTER TABLE lexical_chunks ALTER segment SET NOT NULL, ALTER position SET NOT NULL;
DROP TABLE postings;
