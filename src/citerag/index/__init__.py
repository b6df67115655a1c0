"""Search indexes: vectors (exact, HNSW) and BM25 postings, beside an embedded store (files, caught up per document)
or inside a server store (tables, written in the store's transaction). citerag.backends picks them for a
collection."""
