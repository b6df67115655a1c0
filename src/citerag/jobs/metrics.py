"""The ingest counters: what the queue finished, counted where documents are indexed, by the API process's thread
queue (its GET /metrics, citerag.service.metrics) or by each `citerag worker` (its own --metrics-port) when the
queue is procrastinate. Each registry is the caller's own (never prometheus_client's process-wide default)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

OUTCOMES = ("indexed", "failed", "unchanged")  # exported at zero before the first job ends


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.documents = Counter("citerag_ingest_documents",
                                 "Uploaded documents the ingest queue finished, by outcome.", ["outcome"],
                                 registry=registry)
        self.chunks = Counter("citerag_ingest_chunks", "Chunks stored by the documents the queue indexed.",
                              registry=registry)
        for outcome in OUTCOMES:
            self.documents.labels(outcome)

    def finished(self, status: str, chunks: int = 0) -> None:
        """One document finished with `status` (indexed, failed or unchanged), having stored `chunks`."""
        self.documents.labels(status).inc()
        if chunks:
            self.chunks.inc(chunks)
