"""Ingestion: sources to indexed documents.

    files.py    what an ingestion takes and gives (Source, Outcome, IngestReport) and the files found under paths
    indexer.py  the Indexer: states, stamps, incremental updates, retries, atomic replacement
"""
