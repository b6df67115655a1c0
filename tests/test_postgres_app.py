"""The application on the PostgreSQL backend gives what it gives on the embedded one: the same documents, the
same chunks, the same hits and scores in every mode (exact vector search; HNSW measured in
tests/index/test_pg_hnsw_recall.py), the same cited answer; and a collection created through the catalog lives
in the same database without seeing the other's documents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from citerag.app.home import Citerag
from citerag.app.models import AskOptions, SearchOptions
from citerag.errors import CiteragError
from citerag.settings import Settings

pytest.importorskip("psycopg", reason="the PostgreSQL extra is missing: pip install -e '.[dev]'")

QUERIES = ["How do I list the packages that use the most disk space?",
           "What does the popcon V: number mean?",
           "aptitude search pattern ~i",
           "Which tool backs up the home directory incrementally?"]


def _hits(app: Citerag, query: str, mode: str) -> tuple[list[tuple[str, int, int, int]], np.ndarray]:
    result = app.search(query, SearchOptions(mode=mode, k=10))
    return ([(c.source_path, c.start, c.end, h.rank) for h, c in zip(result.hits, result.citations, strict=True)],
            np.array([[h.score, h.cosine_distance] for h in result.hits]))


def test_postgres_answers_as_the_embedded_store_does(small_corpus: Path, tmp_path: Path, pg_url: str) -> None:
    embedded = Citerag.open(Settings(index_dir=tmp_path / "embedded"), create=True)
    shared = Citerag.open(Settings(index_dir=tmp_path / "pg", store_url=pg_url, vector_index="exact"), create=True)
    for app in (embedded, shared):
        report = app.ingest([small_corpus])
        assert report.failed == [] and len(report.indexed) == 4
    assert [(d.document.name, d.document.chunk_count, d.document.sha256) for d in embedded.status().documents] == \
        [(d.document.name, d.document.chunk_count, d.document.sha256) for d in shared.status().documents]
    for query in QUERIES:
        for mode in ("dense", "bm25", "hybrid"):
            (got, got_scores), (want, want_scores) = _hits(shared, query, mode), _hits(embedded, query, mode)
            assert got == want and len(want) == 10, (query, mode)
            # Cosines are float32 on both sides but summed in another order: they agree to ~1e-7. BM25 scores
            # are float64 on both sides and equal to the reference formula to 1e-9.
            np.testing.assert_allclose(got_scores[:, 0], want_scores[:, 0], rtol=0,
                                       atol=1e-9 if mode == "bm25" else 1e-6)
            np.testing.assert_allclose(got_scores[:, 1], want_scores[:, 1], rtol=0, atol=1e-6)
    question = "How do I list the packages that use the most disk space?"
    a, b = embedded.ask(question, AskOptions()), shared.ask(question, AskOptions())
    assert not a.refused and a.answer == b.answer and b.refused is False
    assert [(c.source_path, c.start, c.end, c.quote, c.fragment) for c in a.citations] == \
        [(c.source_path, c.start, c.end, c.quote, c.fragment) for c in b.citations]
    # A replacement and a delete reach search at once (no index files to catch up).
    doc = next(d.document for d in shared.status().documents if d.document.name == "ch04.md")
    assert any(c.source_path == doc.source_path
               for c in shared.search("user account password", SearchOptions(k=20)).citations)
    shared.delete(doc.id)
    assert all(c.source_path != doc.source_path
               for c in shared.search("user account password", SearchOptions(k=20)).citations)
    embedded.close()
    shared.close()


def test_collections_of_a_postgres_home_share_one_database(small_corpus: Path, tmp_path: Path, pg_url: str) -> None:
    home = Settings(index_dir=tmp_path / "home", store_url=pg_url)
    app = Citerag.open_home(home)
    team = app.create_collection("team", {"threshold": 0.5, "mode": "hybrid"})
    assert team.settings.threshold == 0.5 and team.settings.mode == "hybrid" and team.settings.store_url == pg_url
    assert app.collection_names() == ["default", "team"]
    team.ingest([small_corpus / "ch04.md"])
    app.collection().ingest([small_corpus / "apa.en.html"])
    assert [d.document.name for d in team.status().documents] == ["ch04.md"]
    assert [d.document.name for d in app.collection().status().documents] == ["apa.en.html"]
    hits = team.search("user account password", SearchOptions(k=20)).citations
    assert hits and {c.source_path for c in hits} == {str(small_corpus / "ch04.md")}
    # Another process (a second API server) sees the collection and its settings.
    other = Citerag.open_home(home)
    assert other.collection_names() == ["default", "team"] and other.collection("team").settings.threshold == 0.5
    other.close()
    with pytest.raises(CiteragError, match="already exists"):
        app.create_collection("team", {})
    with pytest.raises(CiteragError, match="cannot be set"):
        app.create_collection("evil", {"openai_base_url": "http://evil.example"})
    app.drop_collection("team")
    assert app.collection_names() == ["default"]
    with pytest.raises(CiteragError, match="cannot be deleted"):
        app.drop_collection("default")
    # Dropped whole: a collection created again under the name starts empty.
    again = app.create_collection("team", {})
    assert again.status().documents == []
    app.close()
