from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trace_fixtures import NOTES_V1, open_app

from citerag.app.home import Citerag
from citerag.trace.setup import provider


@pytest.fixture(scope="session")
def exported() -> InMemorySpanExporter:
    """Every span this test process ends, as an OTLP exporter would receive it."""
    exporter = InMemorySpanExporter()
    sdk = provider()
    assert sdk is not None
    sdk.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture()
def notes_app(tmp_path: Path, exported: InMemorySpanExporter) -> Iterator[Citerag]:
    from citerag.ingest.files import Source

    app = open_app(tmp_path / "index")
    assert app.index_document(Source("notes.md", NOTES_V1.encode())).status == "indexed"
    exported.clear()
    yield app
    app.close()
