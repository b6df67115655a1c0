"""The default ranking: cosine plus BM25 weighed by the question's lexical evidence (search/fusion.py), a fused
encoder's models weighted for the question's language (embed/fused.ranking_vector), on real XQuAD articles."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.embed.fused import DIMS, FOREIGN_SHARE, PARTS, foreign_share, ranking_vector
from citerag.search.fusion import evidence, fused_order
from citerag.settings import DEFAULT_ENCODER, Settings
from citerag.text import collapse
from corpus_paths import ROOT

XQUAD = ROOT / "eval" / "xquad-en" / "corpus"  # CC BY-SA 4.0, eval/xquad-en/README.md
ARTICLES = ("Kenya.txt", "Oxygen.txt", "Normans.txt")


def test_evidence_is_each_chunks_share_of_the_query_mass() -> None:
    found = evidence(np.array([7, 3]), np.array([6.0, 1.5]), 8.0)
    assert found == {7: 0.75, 3: 0.1875}
    assert evidence(np.array([7]), np.array([6.0]), 0.0) == {}  # a query without terms weighs nothing


def test_fused_order_adds_weighted_evidence_and_puts_exact_matches_first() -> None:
    cosine = {1: 0.80, 2: 0.70, 3: 0.60, 4: 0.10}

    def similarity(ids: np.ndarray) -> np.ndarray:
        return np.array([cosine[int(i)] for i in ids])

    # 4 is only a lexical candidate; 3 holds most of the question's rare words.
    ids, scores = fused_order(np.array([1, 2, 3]), {3: 0.9, 4: 0.2, 2: 0.1}, similarity, 0.3)
    assert ids.tolist() == [3, 1, 2, 4]
    assert scores.tolist() == pytest.approx([0.87, 0.80, 0.73, 0.16])
    assert fused_order(np.array([1, 2, 3]), {3: 0.9}, similarity, 0.0)[0].tolist() == [1, 2, 3]  # weight 0: dense
    ids, _ = fused_order(np.array([1, 2, 3]), {3: 0.9, 4: 0.2}, similarity, 0.3, first=[4])
    assert ids.tolist() == [4, 3, 1, 2]


def test_ranking_vector_weighs_the_models_cosines_by_the_questions_language() -> None:
    rng = np.random.default_rng(5)
    names = [PARTS[p] for p in DEFAULT_ENCODER.split("+")]

    def unit(n: int) -> np.ndarray:
        v = rng.normal(size=n).astype(np.float32)
        return v / np.linalg.norm(v)

    q_parts, c_parts = [unit(DIMS[n]) for n in names], [unit(DIMS[n]) for n in names]
    q = np.concatenate(q_parts) / np.sqrt(len(names))  # how FusedEncoder joins its models' vectors
    c = np.concatenate(c_parts) / np.sqrt(len(names))
    cosines = [float(a @ b) for a, b in zip(q_parts, c_parts, strict=True)]
    assert float(ranking_vector(DEFAULT_ENCODER, q, "en") @ c) == pytest.approx(np.mean(cosines), abs=1e-6)
    minilm = names.index("all-MiniLM-L6-v2")
    want = FOREIGN_SHARE * cosines[minilm] + (1 - FOREIGN_SHARE) * cosines[1 - minilm]
    assert float(ranking_vector(DEFAULT_ENCODER, q, "de") @ c) == pytest.approx(want, abs=1e-6)
    assert foreign_share(DEFAULT_ENCODER) == FOREIGN_SHARE
    # A single model, or a fused one with no English-only part, ranks with the index's own cosine.
    assert foreign_share("all-MiniLM-L6-v2") is None and foreign_share("e5+use") is None
    assert ranking_vector("e5+use", q, "de") is q and ranking_vector("all-MiniLM-L6-v2", q, "de") is q


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Citerag]:
    settings = Settings(index_dir=tmp_path_factory.mktemp("xquad") / "index")
    with Citerag.open(settings, create=True) as app:
        app.ingest([XQUAD / a for a in ARTICLES])
        yield app


def test_the_packaged_models_dimensions_are_the_ones_ranking_weighs(app: Citerag) -> None:
    encoder = app.encoder(DEFAULT_ENCODER)
    assert [p.dim for p in encoder.parts] == [DIMS[PARTS[p]] for p in DEFAULT_ENCODER.split("+")]


def _rank(app: Citerag, question: str, needle: str, mode: str) -> int | None:
    hits = app.search(question, SearchOptions(mode=mode, k=10)).hits
    return next((h.rank for h in hits if collapse(needle) in collapse(h.chunk.content)), None)


def test_a_question_naming_its_passages_rare_words_ranks_it_first(app: Citerag) -> None:
    # XQuAD 572914f46aef051400154a46: "2007" and "election" stand together in one paragraph of Kenya.txt.
    needle = "related to the 2007 election aftermath"
    question = "What was the result of the 2007 election?"
    assert _rank(app, question, needle, "adaptive") == 1
    assert _rank(app, question, needle, "dense") != 1
    hits = app.search(question).hits
    # Far from the question in meaning (the paragraph is about Obama's visit), nearest in its words.
    assert hits[0].cosine_distance > hits[1].cosine_distance
    assert hits[0].lexical == max(h.lexical for h in hits) > 0


def test_a_german_question_over_english_text_leans_on_the_multilingual_model(app: Citerag) -> None:
    # XQuAD 5729281baf94a219006aa121 in German (xquad-de-en), asked of the English article.
    needle = "continue to dominate the world of distance running"
    question = "Wer dominiert die Welt des Langstreckenlaufs?"
    assert _rank(app, question, needle, "adaptive") == 1
    assert (_rank(app, question, needle, "dense") or 99) > 1
    with Citerag.open(app.collection().settings.with_changes(lexical_weight=0.0)) as plain:
        assert _rank(plain, question, needle, "adaptive") == 1  # the language weighting alone does it
