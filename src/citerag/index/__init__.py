"""Search indexes beside the store: vectors (exact, HNSW) and BM25 postings, persisted, caught up per document."""
