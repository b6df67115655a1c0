"""The stemmed lexical tokenisation on the German Debian Reference: Unicode words, Snowball stems per detected
language, BM25 both ways, exact words with umlauts, and indexes that refuse the other tokenisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from citerag.app.files import extract_file
from citerag.chunk import chunk_extracted
from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.bm25 import Bm25Index
from citerag.index.sync import SearchIndexes, load
from citerag.search.bm25 import BM25
from citerag.search.phrase import exact_matches
from citerag.store.base import ChunkBatch

CORPUS = Path(__file__).resolve().parents[2] / "eval" / "debian-reference-de" / "corpus"
STEMMED = Analyzer("stemmed")


@pytest.fixture(scope="module")
def chunks() -> list[str]:
    ext = extract_file(CORPUS / "ch01.de.html")
    return [c.text for c in chunk_extracted(ext, "E", 512)]


def _with(chunks: list[str], needle: str) -> int:
    return next(i for i, c in enumerate(chunks) if needle in c)


def test_unicode_words_and_german_stems(chunks: list[str]) -> None:
    i = _with(chunks, "Größe")
    words = STEMMED.words(chunks[i])
    assert "grösse" in words and "gr" not in words  # case folding writes ß as ss
    assert REFERENCE.terms("Größe") == ["gr", "e"]
    # Inflections and the ß/ss spelling meet in one stem; English text keeps English stems.
    assert STEMMED.terms("Größe Größen Grösse", "de") == ["gross"] * 3
    assert STEMMED.terms("Dateien Datei", "de") == ["datei", "datei"]
    assert STEMMED.terms("installed packages", "en") == ["instal", "packag"]
    assert STEMMED.terms("eth0 max_connections apt-get", "de") == ["eth0", "max", "connection", "apt", "get"]
    assert STEMMED.language(chunks[i]) == "de"


def test_bm25_finds_inflected_german_where_the_reference_cannot(chunks: list[str]) -> None:
    i = _with(chunks, "Dateiberechtigungen")
    # A word of the chunk, inflected otherwise: the reference's tokens do not match it at all.
    query = "Dateiberechtigung"
    reference, stemmed = BM25(chunks), BM25(chunks, analyzer=STEMMED)
    assert reference.scores(query).max() == 0.0
    assert stemmed.scores(query)[i] > 0
    best = np.argsort(-stemmed.scores(query))[:4]
    assert any("Dateiberechtigung" in chunks[j] for j in best)


def test_reference_tokenisation_is_unchanged_by_default(chunks: list[str]) -> None:
    query = "Größe der Datei"
    assert np.array_equal(BM25(chunks).scores(query), BM25(chunks, analyzer=REFERENCE).scores(query))


def test_local_index_both_ways_and_stamped(tmp_path: Path, chunks: list[str]) -> None:
    batch = ChunkBatch(ids=np.arange(len(chunks), dtype=np.int64), document_ids=np.zeros(len(chunks), np.int64),
                       texts=chunks, vectors=np.zeros((len(chunks), 2), np.float32))
    for analyzer in (REFERENCE, STEMMED):
        index = Bm25Index(analyzer=analyzer)
        index.add(batch)
        full = BM25(chunks, analyzer=analyzer)
        for query in ("Größe der Dateien", "Benutzer und Gruppen", "z. B. reportbug"):
            assert np.allclose(index.scores(query), full.scores(query), rtol=0, atol=1e-12)
        state = index.save(tmp_path)
        assert state["analyzer"] == analyzer.name
        again = Bm25Index.load(tmp_path, state, analyzer)
        assert np.array_equal(again.scores("Größe"), index.scores("Größe"))
        other = STEMMED if analyzer is REFERENCE else REFERENCE
        with pytest.raises(ValueError, match="tokenisation"):
            Bm25Index.load(tmp_path, state, other)
    assert Bm25Index(analyzer=STEMMED).language == "en"
    index = Bm25Index(analyzer=STEMMED)
    index.add(batch)
    assert index.language == "de"  # the fallback for a query too short to detect


def test_saved_indexes_are_rebuilt_under_another_tokenisation(tmp_path: Path, chunks: list[str]) -> None:
    batch = ChunkBatch(ids=np.arange(3, dtype=np.int64), document_ids=np.zeros(3, np.int64), texts=chunks[:3],
                       vectors=np.eye(3, dtype=np.float32))
    indexes = SearchIndexes(tmp_path, "m", "exact", generation=5)
    indexes.lexical.add(batch)
    indexes.save()
    assert load(tmp_path, "m", "exact").generation == 5
    rebuilt = load(tmp_path, "m", "exact", STEMMED)
    assert rebuilt.generation == -1 and len(rebuilt.lexical) == 0
    assert getattr(rebuilt.lexical, "analyzer") is STEMMED  # noqa: B009


def test_exact_words_with_umlauts(chunks: list[str]) -> None:
    i = _with(chunks, "Größe")
    start = chunks[i].index("Größe")
    phrase = chunks[i][max(0, start - 30):start + 20].split(" ", 1)[1]  # whole words around "Größe"
    contents = dict(enumerate(chunks))
    assert i in exact_matches(phrase, range(len(chunks)), contents, analyzer=STEMMED)
    # The umlaut counts: the same phrase with "Grosse" is other words (exact stays verbatim, not stemmed).
    assert i not in exact_matches(phrase.replace("Größe", "Grosse"), range(len(chunks)), contents, analyzer=STEMMED)
    # The reference's tokens cannot tell "Größe" from "Gräße": both are "gr", "e".
    assert i in exact_matches(phrase.replace("Größe", "Gräße"), range(len(chunks)), contents)
