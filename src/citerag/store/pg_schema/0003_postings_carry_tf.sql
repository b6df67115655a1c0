-- citerag's PostgreSQL schema, version 3: the postings' primary key carries the term frequency, so that a query
-- reads a word's postings from the index alone (an index-only scan) instead of visiting a heap page for each of
-- them: a common word's postings are spread over every page. Measured on 100k chunks, the postings of a
-- 15-word dev question (400k rows): 256 ms without, 145 ms with.
ALTER TABLE postings DROP CONSTRAINT postings_pkey,
    ADD CONSTRAINT postings_pkey PRIMARY KEY (collection_id, term, chunk_id) INCLUDE (tf);
