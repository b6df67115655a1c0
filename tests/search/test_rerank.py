"""The rerank stage with a cross-encoder trained by `citerag train-reranker` on a small real corpus."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.cli import cli
from citerag.errors import CiteragError
from citerag.search.rerank import CrossEncoderReranker, TimedReranker, load_reranker, rerank
from citerag.search.train_reranker import _WH, META_NAME, TrainSettings, make_groups
from citerag.settings import Settings

QUERY = "How is the popcon V: figure next to each package calculated?"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Citerag]:
    from corpus_paths import DEV_CORPUS

    folder = tmp_path_factory.mktemp("docs")
    for name in ("pr01.en.html", "apa.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    ix = tmp_path_factory.mktemp("ix")
    app = Citerag.open(Settings(index_dir=ix), create=True)
    assert len(app.ingest([folder]).indexed) == 2
    return ix, app


def hybrid(app: Citerag, query: str, k: int) -> list:  # type: ignore[type-arg]
    return app.search(query, SearchOptions(mode="hybrid", k=k)).hits


@pytest.fixture(scope="module")
def model_dir(index: tuple[Path, Citerag], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reranker trained by the command itself, with a pair count small enough for a test."""
    ix, _ = index
    out = tmp_path_factory.mktemp("models") / "reranker"
    result = CliRunner().invoke(cli, ["train-reranker", "--index", str(ix), "--out", str(out), "--pairs", "64",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["pairs"] == 64 and report["groups"] == 16 and report["heldout_groups"] == 8
    assert report["seconds_training"] > 0 and len(report["losses"]) == 4  # 16 groups, 4 per step
    return out


def test_reranking_reorders_the_shortlist_as_the_model_scores_it(index, model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    _, app = index
    hits = hybrid(app, QUERY, 20)
    assert len(hits) == 20
    reranker = load_reranker(str(model_dir))
    scores = reranker.score(QUERY, [h.chunk.text for h in hits[:10]])
    expected = [hits[i].chunk.id for i in sorted(range(10), key=lambda i: (-scores[i], i))]
    reranked = rerank(QUERY, hits, reranker, shortlist=10)
    assert [h.chunk.id for h in reranked] == expected
    assert [h.rank for h in reranked] == list(range(1, 11))
    assert [h.score for h in reranked] == pytest.approx(sorted(scores.tolist(), reverse=True))
    before = {h.chunk.id: h.cosine_distance for h in hits}
    assert all(h.cosine_distance == before[h.chunk.id] for h in reranked)  # the gate sees the same distances
    assert expected != [h.chunk.id for h in hits[:10]]  # the model does reorder this list


def test_the_trained_reranker_loads_and_runs_offline_in_a_fresh_process(model_dir: Path, tmp_path: Path) -> None:
    meta = json.loads((model_dir / META_NAME).read_text())
    assert meta["base_model"] == "all-MiniLM-L6-v2" and meta["settings"]["max_length"] == 128
    pairs = [QUERY, ["The popcon number counts votes.", "Printers are configured with CUPS."]]
    code = ("import json, sys; from citerag.search.rerank import CrossEncoderReranker; "
            f"print(json.dumps(CrossEncoderReranker(sys.argv[1]).score({pairs[0]!r}, {pairs[1]!r}).tolist()))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "empty-hf"),
           "NO_PROXY": "*", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-c", code, str(model_dir)], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    fresh = np.array(json.loads(out.stdout.strip().splitlines()[-1]))
    here = CrossEncoderReranker(str(model_dir)).score(pairs[0], pairs[1])
    assert fresh == pytest.approx(here, abs=1e-5)


def test_a_trained_folder_is_read_at_the_length_it_was_trained_at(model_dir: Path) -> None:
    # Trained on 128-token pairs: scoring at 256 would show it passage text it never learned from.
    assert CrossEncoderReranker(str(model_dir)).max_length == 128
    assert CrossEncoderReranker(str(model_dir))._model.max_seq_length == 128
    assert CrossEncoderReranker(str(model_dir), max_length=256)._model.max_seq_length == 256
    long_passage = " ".join(["The popcon number counts votes."] * 60)
    at_128 = CrossEncoderReranker(str(model_dir)).score(QUERY, [long_passage])
    at_256 = CrossEncoderReranker(str(model_dir), max_length=256).score(QUERY, [long_passage])
    assert at_128 != pytest.approx(at_256, abs=1e-6)  # the length does change what the model reads


class OverlapReranker:
    """A real (if crude) reranker: shared query words per passage. Used to pin down ordering rules."""

    name = "overlap"

    def score(self, query: str, passages: list[str]) -> np.ndarray:
        words = set(query.lower().split())
        return np.array([len(words & set(p.lower().split())) for p in passages], dtype=np.float64)


def test_ties_keep_retrieval_order_and_the_tail_is_dropped(index) -> None:  # type: ignore[no-untyped-def]
    _, app = index
    hits = hybrid(app, "popcon package votes", 12)
    timed = TimedReranker(OverlapReranker())
    out = rerank("popcon package votes", hits, timed, shortlist=8)
    assert len(out) == 8 and {h.chunk.id for h in out} == {h.chunk.id for h in hits[:8]}
    keyed = [(-h.score, next(i for i, g in enumerate(hits) if g.chunk.id == h.chunk.id)) for h in out]
    assert keyed == sorted(keyed)
    assert len(timed.seconds) == 1 and rerank("q", [], timed) == []

    class Broken(OverlapReranker):
        def score(self, query: str, passages: list[str]) -> np.ndarray:
            return np.zeros(len(passages) + 1)

    with pytest.raises(CiteragError, match="returned"):
        rerank("q", hits, Broken(), 5)


def test_training_groups_come_from_the_corpus_alone(index) -> None:  # type: ignore[no-untyped-def]
    _, app = index
    chunks, _ = app.collection().indexed_chunks()
    by_id = {c.id: c for c in chunks}
    flat = " ".join

    # The default: a damaged sentence as the query, its own chunk (sentence left in) as the positive.
    settings = TrainSettings()
    groups = make_groups(chunks, 20, settings, random.Random(1))
    assert groups == make_groups(chunks, 20, settings, random.Random(1))  # seeded: reproducible
    for g in groups:
        assert len(g.passages) == settings.group_size
        source = by_id[g.chunk_id]
        assert g.passages[0] == source.text and source.text not in g.passages[1:]
        text, pos = flat(source.content.split()), 0
        for word in g.query.split():  # the query's words, in order, from its own chunk
            pos = text.find(word, pos)
            assert pos >= 0, (word, g.query)
            pos += len(word)

    # Cut out of its passage (the inverse cloze variant): neither the positive nor a negative holds it.
    cloze = TrainSettings(keep_sentence=0.0, drop_words=0.0)
    groups = make_groups(chunks, 20, cloze, random.Random(2))
    for g in groups:
        assert g.query in flat(by_id[g.chunk_id].content.split())
        assert all(g.query not in flat(p.split()) for p in g.passages[1:])
    # Cut from the positive, unless almost nothing would be left of it (then it stays).
    assert sum(g.query not in flat(g.passages[0].split()) for g in groups) >= 15

    # Question-shaped: an opener from _WH, then content words of a sentence of the positive, ending in "?".
    groups = make_groups(chunks, 20, TrainSettings(query_style="question"), random.Random(3))
    for g in groups:
        opener = next(w for w in _WH if g.query.startswith(w + " "))
        assert g.query.endswith("?") and g.passages[0] == by_id[g.chunk_id].text
        source = by_id[g.chunk_id]
        words = g.query[len(opener):-1].split()
        assert words and all(w.rstrip(":").lower() in (source.content + " " + source.section).lower()
                             for w in words), g.query


def test_search_and_ask_take_the_rerank_stage(index, model_dir: Path) -> None:  # type: ignore[no-untyped-def]
    ix, _ = index
    runner = CliRunner()
    res = runner.invoke(cli, ["search", QUERY, "--index", str(ix), "--mode", "hybrid", "--rerank", str(model_dir),
                              "--shortlist", "8", "--k", "5", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["rank"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    res = runner.invoke(cli, ["ask", QUERY, "--index", str(ix), "--rerank", str(model_dir), "--json"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert {"question", "refused", "answer", "citations", "check", "timings_ms"} <= set(data)
    assert "rerank" in data["timings_ms"] and data["generator"] == "extractive"


def test_a_missing_model_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CiteragError, match="not a model folder"):
        CrossEncoderReranker(str(tmp_path / "nope" / "model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CiteragError, match="no config.json"):
        CrossEncoderReranker(str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CiteragError, match="cannot load reranker"):
        CrossEncoderReranker("someone/not-in-the-cache")
