"""End to end on real text with the real encoder: ingest, search, gate, cite, answer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from citerag.answer.generators import ExtractiveGenerator
from citerag.answer.pipeline import answer_question
from citerag.config import Config, load_config
from citerag.ingest import Indexer
from citerag.search import Retriever, gate
from citerag.store import Store, open_store
from citerag.types import Citation
from corpus_paths import DEV_SET

QUESTIONS = {q["id"]: q for q in map(json.loads, (DEV_SET / "questions.jsonl").read_text().splitlines())}


def _indexer(index: Path, encoder, **overrides) -> tuple[Indexer, Store, Config]:  # type: ignore[no-untyped-def]
    store = open_store(index, create=True)
    cfg = load_config(index, **overrides)
    from citerag.embed import load_encoder

    return Indexer(store, cfg, lambda: load_encoder(cfg.embedding_model)), store, cfg


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, encoder) -> tuple[Store, Retriever, Path]:  # type: ignore[no-untyped-def]
    from corpus_paths import DATA, DEV_CORPUS

    folder = tmp_path_factory.mktemp("corpus")
    for name in ("ch08.en.html", "apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    shutil.copy(DATA / "markdown" / "debian-reference" / "ch04.md", folder / "ch04.md")
    index = tmp_path_factory.mktemp("index")
    indexer, store, cfg = _indexer(index, encoder)
    report = indexer.ingest([folder])
    assert len(report.indexed) == 4 and not report.failed
    assert report.over_window >= 0 and 0 < report.header_tokens < report.embedded_tokens
    return store, Retriever(store.snapshot(cfg.embedding_model), encoder), folder


class SpyGenerator:
    """The real extractive generator, counting its calls."""

    name = "spy"

    def __init__(self, encoder) -> None:  # type: ignore[no-untyped-def]
        self.inner = ExtractiveGenerator(encoder)
        self.calls = 0

    def generate(self, question: str, sources: list[Citation], prompt: str) -> str:
        self.calls += 1
        return self.inner.generate(question, sources, prompt)


def test_documents_are_stamped_and_counted_by_the_indexer(built) -> None:  # type: ignore[no-untyped-def]
    store, retriever, _ = built
    docs = store.documents()
    assert {d.status for d in docs} == {"indexed"}
    for d in docs:
        assert d.chunk_count == sum(c.document_id == d.id for c in retriever.snapshot.chunks) > 0
        assert d.stamps["embedding_model"] == "all-MiniLM-L6-v2" and d.stamps["embedding_dim"] == 384
        assert d.stamps["strategy"] == "E" and d.stamps["strategy_params"] == {"target": 512, "overlap": 0}
        assert d.stamps["extractor"] in ("html", "markdown") and d.stamps["pipeline_version"]
    assert np.allclose(np.linalg.norm(retriever.snapshot.vectors, axis=1), 1.0, atol=1e-4)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_every_hit_carries_its_true_cosine_distance(built, encoder, mode: str) -> None:  # type: ignore[no-untyped-def]
    _, retriever, _ = built
    query = QUESTIONS["dr-27-doc"]["query"]
    hits = retriever.search(query, mode=mode, k=10)
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1)) and hits
    q = encoder.encode([query])[0]
    index = {c.id: i for i, c in enumerate(retriever.snapshot.chunks)}
    for h in hits:
        assert h.cosine_distance == pytest.approx(1 - float(retriever.snapshot.vectors[index[h.chunk.id]] @ q),
                                                  abs=1e-5)
    needle = QUESTIONS["dr-27-doc"]["needle"]
    assert any(needle in " ".join(h.chunk.text.split()) for h in hits[:4])


@pytest.mark.parametrize("qid", ["dr-27-doc", "dr-01-ticket", "dr-40-doc", "dr-16-doc"])
def test_answers_cite_exact_character_ranges(built, encoder, qid: str) -> None:  # type: ignore[no-untyped-def]
    store, retriever, _ = built
    q = QUESTIONS[qid]
    spy = SpyGenerator(encoder)
    result = answer_question(q["query"], retriever, spy, store.canonical_text, threshold=0.675)
    assert not result.refused and spy.calls == 1
    assert 1 <= len(result.citations) <= 4
    for c in result.citations:
        text = store.canonical_text(c.document_id)
        assert c.quote == text[c.start:c.end]
        assert c.fragment == f"#char={c.start},{c.end}" and c.cosine_distance < 0.675
        assert c.document_name in (Path(c.source_path).name,) and c.locator_label
        assert f"[{c.index}]" in result.prompt  # type: ignore[operator]
    assert any(q["needle"] in " ".join(c.quote.split()) for c in result.citations), q["needle"]
    # Every [n] the generator wrote names a source.
    import re

    marks = {int(m) for m in re.findall(r"\[(\d+)\]", result.answer)}
    assert marks and marks <= {c.index for c in result.citations}


def test_gate_refuses_without_calling_the_generator(built, encoder) -> None:  # type: ignore[no-untyped-def]
    store, retriever, _ = built
    spy = SpyGenerator(encoder)
    question = "What is the best oven temperature for baking sourdough bread?"
    result = answer_question(question, retriever, spy, store.canonical_text, threshold=0.675)
    assert result.refused and spy.calls == 0 and result.citations == []
    assert result.answer == f'NO ANSWER: nothing under cosine distance 0.675 for "{question}"'
    # An answerable question refused by a strict threshold: still no call.
    strict = answer_question(QUESTIONS["dr-27-doc"]["query"], retriever, spy, store.canonical_text, threshold=0.05)
    assert strict.refused and spy.calls == 0


def test_gate_keeps_at_most_four_in_rank_order(built) -> None:  # type: ignore[no-untyped-def]
    _, retriever, _ = built
    hits = retriever.search(QUESTIONS["dr-28-doc"]["query"], mode="hybrid", k=20)
    kept = gate(hits, threshold=0.9, max_sources=4)
    assert len(kept) == 4 and [h.rank for h in kept] == sorted(h.rank for h in kept)
    cut = sorted(h.cosine_distance for h in hits)[3]
    assert all(h.cosine_distance < cut for h in gate(hits, threshold=cut))


def test_reingest_touches_only_what_changed(small_corpus: Path, tmp_path: Path, encoder) -> None:  # type: ignore[no-untyped-def]
    indexer, store, _ = _indexer(tmp_path / "ix", encoder)
    assert len(indexer.ingest([small_corpus]).indexed) == 4
    before = {d.source_path: d for d in store.documents()}

    def chunk_ids() -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for c in store.snapshot("all-MiniLM-L6-v2").chunks:
            out.setdefault(c.document_id, []).append(c.id)
        return out

    ids_before = chunk_ids()

    again = indexer.ingest([small_corpus])
    assert again.indexed == [] and again.unchanged == 4 and again.removed == []

    changed = small_corpus / "ch04.md"
    changed.write_text(changed.read_text() + "\n\nA new closing paragraph about passwords.\n")
    (small_corpus / "apa.en.html").unlink()
    third = indexer.ingest([small_corpus])
    assert third.indexed == [str(changed.resolve())] and third.unchanged == 2
    assert third.removed == [str((small_corpus / "apa.en.html").resolve())]
    after = {d.source_path: d for d in store.documents()}
    assert set(after) == set(before) - {third.removed[0]}
    ids_after = chunk_ids()
    for path, doc in after.items():
        assert doc.id == before[path].id
        # Untouched documents keep their very rows; the changed one was rewritten.
        assert (ids_after[doc.id] == ids_before[doc.id]) == (path != third.indexed[0])
    assert "A new closing paragraph about passwords." in store.canonical_text(after[third.indexed[0]].id)


def test_bad_files_fail_alone_and_retry(small_corpus: Path, tmp_path: Path, encoder) -> None:  # type: ignore[no-untyped-def]
    (small_corpus / "binary.txt").write_bytes(bytes(range(256)) * 64)
    (small_corpus / "empty.md").write_bytes(b"")
    (small_corpus / "latin1.md").write_bytes("## Caf\xe9\nNa\xefve r\xe9sum\xe9 text about locales.".encode("latin-1"))
    indexer, store, cfg = _indexer(tmp_path / "ix", encoder)
    report = indexer.ingest([small_corpus])
    reasons = dict(report.failed)
    assert set(reasons) == {str((small_corpus / n).resolve()) for n in ("binary.txt", "empty.md")}
    assert "binary data" in reasons[str((small_corpus / "binary.txt").resolve())]
    assert "empty file" in reasons[str((small_corpus / "empty.md").resolve())]
    assert len(report.indexed) == 5
    latin = store.document_by_path(str((small_corpus / "latin1.md").resolve()))
    assert latin is not None and latin.status == "indexed" and "Windows-1252" in latin.warnings[0]
    assert "Naïve résumé" in store.canonical_text(latin.id)
    retriever = Retriever(store.snapshot(cfg.embedding_model), encoder)
    assert retriever.search(QUESTIONS["dr-27-doc"]["query"], k=3)

    (small_corpus / "empty.md").write_text("## Fixed\nNow the file has text about printing.\n")
    retried = indexer.retry_failed()
    assert retried.indexed == [str((small_corpus / "empty.md").resolve())] and len(retried.failed) == 1
    assert {d.name: d.status for d in store.documents()}["empty.md"] == "indexed"


def test_stale_after_the_embedding_model_changes(small_corpus: Path, tmp_path: Path, encoder) -> None:  # type: ignore[no-untyped-def]
    from citerag.embed.sentence_transformer import packaged_model_dirs

    index = tmp_path / "ix"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    for name in ("apa.en.html", "ch04.md"):
        shutil.move(small_corpus / name, first / name)
    indexer, store, _ = _indexer(index, encoder)
    indexer.ingest([first])

    # The same weights under another name: a different model as far as stamps are concerned.
    other = tmp_path / "minilm-copy"
    other.symlink_to(packaged_model_dirs()["all-MiniLM-L6-v2"], target_is_directory=True)
    (index / "config.toml").write_text(f'embedding_model = "{other}"\n')
    shutil.move(small_corpus / "pr01.en.html", second / "pr01.en.html")
    indexer2, store2, cfg2 = _indexer(index, encoder)
    assert cfg2.embedding_model == str(other)
    assert len(indexer2.ingest([second]).indexed) == 1

    stale = sorted(d.name for d in store2.documents() if indexer2.stale(d))
    assert stale == ["apa.en.html", "ch04.md"]
    assert store2.snapshot(str(other)).excluded_documents == 2
    rebuilt = indexer2.reindex_stale()
    assert sorted(Path(p).name for p in rebuilt.indexed) == ["apa.en.html", "ch04.md"]
    assert not any(indexer2.stale(d) for d in store2.documents())
    assert store2.snapshot(str(other)).excluded_documents == 0
    assert indexer2.reindex_stale().indexed == []


@pytest.mark.parametrize("strategy", ["A", "B", "C", "D", "E", "F"])
def test_every_strategy_ingests_and_stamps(strategy: str, tmp_path: Path, encoder) -> None:  # type: ignore[no-untyped-def]
    from corpus_paths import DEV_CORPUS

    indexer, store, cfg = _indexer(tmp_path / "ix", encoder, strategy=strategy)
    report = indexer.ingest([DEV_CORPUS / "apa.en.html"])
    assert len(report.indexed) == 1 and not report.failed
    (doc,) = store.documents()
    assert doc.stamps["strategy"] == strategy and doc.chunk_count == report.chunks > 5
    assert (report.header_tokens > 0) == (strategy in "EF")
