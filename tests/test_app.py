"""The application core end to end on real text with the real encoder: ingest, search, gate, cite, answer."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from citerag.app.home import Citerag
from citerag.app.models import AskOptions, SearchOptions
from citerag.embed import encode_queries, load_encoder
from citerag.errors import CiteragError
from citerag.ingest.files import Source
from citerag.settings import DEFAULT_ENCODER, Settings, SettingsError
from citerag.types import Citation
from corpus_paths import DATA, DEV_CORPUS, DEV_SET

QUESTIONS = {q["id"]: q for q in map(json.loads, (DEV_SET / "questions.jsonl").read_text().splitlines())}


def _app(index: Path, **settings) -> Citerag:  # type: ignore[no-untyped-def]
    return Citerag.open(Settings(index_dir=index, **settings), create=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Citerag:
    folder = tmp_path_factory.mktemp("corpus")
    for name in ("ch08.en.html", "apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    shutil.copy(DATA / "markdown" / "debian-reference" / "ch04.md", folder / "ch04.md")
    app = _app(tmp_path_factory.mktemp("index"))
    report = app.ingest([folder])
    assert len(report.indexed) == 4 and not report.failed
    assert report.over_window >= 0 and 0 < report.header_tokens < report.embedded_tokens
    return app


class SpyGenerator:
    """The real extractive generator, counting its calls."""

    name = "spy"

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.calls = 0

    def generate(self, question: str, sources: list[Citation], prompt: str) -> str:
        self.calls += 1
        return str(self.inner.generate(question, sources, prompt))


@pytest.fixture()
def spy(built: Citerag, monkeypatch: pytest.MonkeyPatch) -> SpyGenerator:
    spy = SpyGenerator(built.generator(built.collection().settings))
    monkeypatch.setattr(built, "generator", lambda settings: spy)
    return spy


def test_documents_are_stamped_and_counted_by_the_indexer(built: Citerag) -> None:
    docs = built.collection().documents()
    chunks, _ = built.collection().indexed_chunks()
    assert {d.status for d in docs} == {"indexed"}
    for d in docs:
        assert d.chunk_count == sum(c.document_id == d.id for c in chunks) > 0
        assert d.stamps["embedding_model"] == DEFAULT_ENCODER and d.stamps["embedding_dim"] == 896
        assert d.stamps["strategy"] == "E" and d.stamps["strategy_params"] == {"target": 512, "overlap": 0}
        assert d.stamps["extractor"] in ("html", "markdown") and d.stamps["pipeline_version"]
    snapshot = built.collection().store.snapshot(DEFAULT_ENCODER)
    assert np.allclose(np.linalg.norm(snapshot.vectors, axis=1), 1.0, atol=1e-4)


@pytest.mark.parametrize("mode", ["dense", "bm25", "hybrid"])
def test_every_hit_carries_its_true_cosine_distance(built: Citerag, mode: str) -> None:
    query = QUESTIONS["dr-27-doc"]["query"]
    result = built.search(query, SearchOptions(mode=mode, k=10))
    hits = result.hits
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1)) and hits
    snapshot = built.collection().store.snapshot(DEFAULT_ENCODER)
    q = encode_queries(load_encoder(DEFAULT_ENCODER), [query])[0]
    index = {c.id: i for i, c in enumerate(snapshot.chunks)}
    for h, c in zip(hits, result.citations, strict=True):
        assert h.cosine_distance == pytest.approx(1 - float(snapshot.vectors[index[h.chunk.id]] @ q), abs=1e-5)
        assert c.quote == h.chunk.content and c.cosine_distance == h.cosine_distance
    needle = QUESTIONS["dr-27-doc"]["needle"]
    assert any(needle in " ".join(h.chunk.text.split()) for h in hits[:4])


@pytest.mark.parametrize("qid", ["dr-27-doc", "dr-01-ticket", "dr-40-doc", "dr-16-doc"])
def test_answers_cite_exact_character_ranges(built: Citerag, spy: SpyGenerator, qid: str) -> None:
    q = QUESTIONS[qid]
    result = built.ask(q["query"], AskOptions(threshold=0.675))
    assert not result.refused and spy.calls == 1
    assert 1 <= len(result.citations) <= 4
    store = built.collection().store
    for c in result.citations:
        text = store.canonical_text(c.document_id)
        assert c.quote == text[c.start:c.end]
        assert c.fragment == f"#char={c.start},{c.end}" and c.cosine_distance < 0.675
        assert c.document_name in (Path(c.source_path).name,) and c.locator_label
        assert f"[{c.index}]" in result.prompt  # type: ignore[operator]
    assert any(q["needle"] in " ".join(c.quote.split()) for c in result.citations), q["needle"]
    marks = {int(m) for m in re.findall(r"\[(\d+)\]", result.answer)}
    assert marks and marks <= {c.index for c in result.citations}


def test_gate_refuses_without_calling_the_generator(built: Citerag, spy: SpyGenerator) -> None:
    question = "What is the best oven temperature for baking sourdough bread?"
    result = built.ask(question)
    assert result.refused and spy.calls == 0 and result.citations == []
    rule = built.collection().refusal_rule()  # ingest calibrated it: the refusal names its cut
    assert rule is not None and result.threshold == rule.threshold
    assert result.answer == (f'NO ANSWER: nothing under cosine distance {rule.threshold:g} (calibrated rule) '
                             f'for "{question}"')
    # An answerable question refused by a strict threshold: still no call.
    strict = built.ask(QUESTIONS["dr-27-doc"]["query"], AskOptions(threshold=0.05))
    assert strict.refused and spy.calls == 0


def test_gate_keeps_at_most_four_in_rank_order(built: Citerag) -> None:
    question = QUESTIONS["dr-28-doc"]["query"]
    answer = built.ask(question, AskOptions(mode="hybrid", threshold=0.9, max_sources=4))
    hits = built.search(question, SearchOptions(mode="hybrid", k=20)).hits
    assert len(answer.citations) == 4
    assert [c.start for c in answer.citations] == [h.chunk.start for h in hits[:4]]
    two = built.ask(question, AskOptions(mode="hybrid", threshold=0.9, max_sources=2))
    assert [c.start for c in two.citations] == [h.chunk.start for h in hits[:2]]


def test_citation_counters_live_in_the_application(built: Citerag) -> None:
    before = built.citation_metrics.snapshot()["citerag_answers_checked_total"]
    question = QUESTIONS["dr-27-ticket"]["query"]
    assert not built.ask(question).refused
    built.ask("What is the best oven temperature for baking sourdough bread?")  # refused: nothing checked
    assert built.citation_metrics.snapshot()["citerag_answers_checked_total"] == before + 1
    again = built.ask(question)  # from the answer cache: checked once, when it was generated
    assert again.cache["answer"] and built.citation_metrics.snapshot()["citerag_answers_checked_total"] == before + 1


@pytest.mark.parametrize("options, field", [
    (AskOptions(k=-5), "k"), (AskOptions(max_sources=0), "max_sources"), (AskOptions(threshold=float("nan")),
                                                                          "threshold"),
    (AskOptions(mode="semantic"), "mode"), (AskOptions(generator="gpt"), "generator"),
])
def test_bad_request_options_name_the_field(built: Citerag, options: AskOptions, field: str) -> None:
    with pytest.raises(SettingsError, match=field):
        built.ask("How do I generate a locale?", options)


def test_questions_must_be_text(built: Citerag) -> None:
    with pytest.raises(CiteragError, match="not valid UTF-8"):
        built.ask("apt \udcff sources")
    with pytest.raises(CiteragError, match="empty"):
        built.search("   ")


def test_reingest_touches_only_what_changed(small_corpus: Path, tmp_path: Path) -> None:
    app = _app(tmp_path / "ix")
    store = app.collection().store
    assert len(app.ingest([small_corpus]).indexed) == 4
    before = {d.source_path: d for d in store.documents()}

    def chunk_ids() -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for c in store.snapshot(DEFAULT_ENCODER).chunks:
            out.setdefault(c.document_id, []).append(c.id)
        return out

    ids_before = chunk_ids()
    again = app.ingest([small_corpus])
    assert again.indexed == [] and again.unchanged == 4 and again.removed == []

    changed = small_corpus / "ch04.md"
    changed.write_text(changed.read_text() + "\n\nA new closing paragraph about passwords.\n")
    (small_corpus / "apa.en.html").unlink()
    third = app.ingest([small_corpus])
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
    # The long-lived application sees the new version without being reopened.
    hit = app.search("A new closing paragraph about passwords", SearchOptions(mode="bm25", k=1)).citations[0]
    assert "A new closing paragraph about passwords." in hit.quote


def test_bad_files_fail_alone_and_retry(small_corpus: Path, tmp_path: Path) -> None:
    (small_corpus / "binary.txt").write_bytes(bytes(range(256)) * 64)
    (small_corpus / "empty.md").write_bytes(b"")
    (small_corpus / "latin1.md").write_bytes("## Caf\xe9\nNa\xefve r\xe9sum\xe9 text about locales.".encode("latin-1"))
    app = _app(tmp_path / "ix")
    store = app.collection().store
    report = app.ingest([small_corpus])
    reasons = dict(report.failed)
    assert set(reasons) == {str((small_corpus / n).resolve()) for n in ("binary.txt", "empty.md")}
    assert "binary data" in reasons[str((small_corpus / "binary.txt").resolve())]
    assert "empty file" in reasons[str((small_corpus / "empty.md").resolve())]
    assert len(report.indexed) == 5
    latin = store.document_by_path(str((small_corpus / "latin1.md").resolve()))
    assert latin is not None and latin.status == "indexed" and "Windows-1252" in latin.warnings[0]
    assert "Naïve résumé" in store.canonical_text(latin.id)
    assert app.search(QUESTIONS["dr-27-doc"]["query"], SearchOptions(k=3)).hits

    (small_corpus / "empty.md").write_text("## Fixed\nNow the file has text about printing.\n")
    retried = app.retry_failed()
    assert retried.indexed == [str((small_corpus / "empty.md").resolve())] and len(retried.failed) == 1
    assert {d.name: d.status for d in store.documents()}["empty.md"] == "indexed"


def test_index_document_takes_bytes_and_a_name(tmp_path: Path) -> None:
    """What an upload endpoint or a worker calls: no file on disk, the URI is the document's key."""
    app = _app(tmp_path / "ix")
    data = (DATA / "markdown" / "debian-reference" / "ch04.md").read_bytes()
    first = app.index_document(Source("upload://team-a/ch04.md", data))
    assert first.status == "indexed"
    assert app.index_document(Source("upload://team-a/ch04.md", data)).status == "unchanged"
    doc = app.collection().store.document(first.document_id)
    assert doc is not None and doc.name == "ch04.md" and doc.source_path == "upload://team-a/ch04.md"
    bad = app.index_document(Source("upload://team-a/notes.xyz", b"some text"))
    assert bad.status == "failed" and "unsupported format .xyz" in (bad.error or "")
    citation = app.search("password", SearchOptions(k=1)).citations[0]
    assert citation.source_path == "upload://team-a/ch04.md"
    app.delete(first.document_id)
    assert [d.name for d in app.collection().documents()] == ["notes.xyz"]
    with pytest.raises(CiteragError, match="no document"):
        app.delete(first.document_id)


def test_a_failed_reindex_keeps_serving_the_old_version(small_corpus: Path, tmp_path: Path) -> None:
    app = _app(tmp_path / "ix")
    app.ingest([small_corpus])
    doc_path = small_corpus / "ch04.md"
    old = app.collection().store.document_by_path(str(doc_path.resolve()))
    assert old is not None
    doc_path.write_bytes(b"")  # the new version cannot be indexed
    report = app.ingest([small_corpus])
    assert [p for p, _ in report.failed] == [str(doc_path.resolve())]
    now = app.collection().store.document_by_path(str(doc_path.resolve()))
    assert now is not None and now.status == "indexed" and now.chunk_count == old.chunk_count
    assert now.error and "empty file" in now.error
    hits = app.search("password", SearchOptions(mode="bm25", k=20)).hits
    assert any(h.document.id == old.id for h in hits)  # still served
    assert app.status().counts["stale"] == 0
    doc_path.write_text("## Passwords\nA fixed file about passwords and shadow files.\n")
    assert app.retry_failed().indexed == [str(doc_path.resolve())]
    fixed = app.collection().store.document_by_path(str(doc_path.resolve()))
    assert fixed is not None and fixed.error is None and fixed.chunk_count == 1


def test_stale_after_the_embedding_model_changes(small_corpus: Path, tmp_path: Path) -> None:
    from citerag.embed.sentence_transformer import packaged_model_dirs

    index = tmp_path / "ix"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    for name in ("apa.en.html", "ch04.md"):
        shutil.move(small_corpus / name, first / name)
    with _app(index) as app:
        app.ingest([first])

    # The same weights under another name: a different model as far as stamps are concerned.
    other = tmp_path / "minilm-copy"
    other.symlink_to(packaged_model_dirs()["all-MiniLM-L6-v2"], target_is_directory=True)
    shutil.move(small_corpus / "pr01.en.html", second / "pr01.en.html")
    app2 = _app(index, embedding_model=str(other))
    assert len(app2.ingest([second]).indexed) == 1

    status = app2.status()
    assert sorted(r.document.name for r in status.documents if r.stale) == ["apa.en.html", "ch04.md"]
    assert status.counts["stale"] == 2
    assert app2.collection().store.snapshot(str(other)).excluded_documents == 2
    rebuilt = app2.reindex_stale()
    assert sorted(Path(p).name for p in rebuilt.indexed) == ["apa.en.html", "ch04.md"]
    assert app2.status().counts["stale"] == 0
    assert app2.collection().store.snapshot(str(other)).excluded_documents == 0
    assert app2.reindex_stale().indexed == []


@pytest.mark.parametrize("strategy", ["A", "B", "C", "D", "E", "F"])
def test_every_strategy_ingests_and_stamps(strategy: str, tmp_path: Path) -> None:
    app = _app(tmp_path / "ix", strategy=strategy)
    report = app.ingest([DEV_CORPUS / "apa.en.html"])
    assert len(report.indexed) == 1 and not report.failed
    (doc,) = app.collection().documents()
    assert doc.stamps["strategy"] == strategy and doc.chunk_count == report.chunks > 5
    assert (report.header_tokens > 0) == (strategy in "EF")


def test_collections_are_apart_and_share_the_encoder(tmp_path: Path) -> None:
    app = Citerag()
    a = app.open_collection(Settings(index_dir=tmp_path / "a", collection="team-a"), create=True)
    b = app.open_collection(Settings(index_dir=tmp_path / "b", collection="team-b", threshold=0.3), create=True)
    a.ingest([DEV_CORPUS / "apa.en.html"])
    b.ingest([DATA / "markdown" / "debian-reference" / "ch04.md"])
    assert app.collection().name == "team-a"
    assert {Path(c.source_path).name for c in a.search("password", SearchOptions(k=20)).citations} == {"apa.en.html"}
    assert {Path(c.source_path).name for c in b.search("password", SearchOptions(k=20)).citations} == {"ch04.md"}
    assert b.ask("How do I bake sourdough bread?").answer.startswith("NO ANSWER: nothing under cosine distance 0.3 ")
    assert app.encoder(DEFAULT_ENCODER) is a.indexer._encoder() is b.indexer._encoder()
    with pytest.raises(CiteragError, match="already open"):
        app.open_collection(Settings(index_dir=tmp_path / "c", collection="team-a"), create=True)
    app.close()


def test_ingest_saves_the_search_indexes_a_fresh_process_opens(built: Citerag, tmp_path: Path) -> None:
    """Writes leave the indexes saved at the store's generation; a process opening them (here, a copy of the
    folder) searches the same hits with what was saved, without rebuilding or saving anything."""
    collection = built.collection()
    folder = collection.settings.sqlite_dir
    manifest = json.loads((folder / "search" / "minilm_use-exact" / "manifest.json").read_text())
    assert manifest["generation"] == collection.store.generation()
    query = "How do I list the packages that use the most disk space?"
    want = [(c.source_path, c.start) for c in built.search(query, SearchOptions(mode="hybrid", k=8)).citations]
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    reader = Citerag.open(Settings(index_dir=copy))
    got = [(c.source_path, c.start) for c in reader.search(query, SearchOptions(mode="hybrid", k=8)).citations]
    indexes = reader.collection().search_backend.indexes  # type: ignore[attr-defined]
    assert indexes is not None and indexes.token == manifest["token"]  # loaded, not rebuilt and saved anew
    assert got == want and len(want) == 8
    reader.close()


def test_a_question_reads_one_store_view_and_runs_the_gate_once(built: Citerag, spy: SpyGenerator,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import citerag.answer.pipeline as pipeline

    collection = built.collection()
    views, gates = [], []
    real_view, real_gate = collection.store.view, pipeline.gate

    def counted_view():  # type: ignore[no-untyped-def]
        views.append(1)
        return real_view()

    def counted_gate(*args, **kwargs):  # type: ignore[no-untyped-def]
        gates.append(1)
        return real_gate(*args, **kwargs)

    monkeypatch.setattr(collection.store, "view", counted_view)
    monkeypatch.setattr(pipeline, "gate", counted_gate)
    question = "Which command shows the status of a service unit, counted for views?"
    first = built.ask(question, AskOptions(threshold=1.5))
    assert not first.refused and first.cache["answer"] is False
    assert (len(views), len(gates), spy.calls) == (1, 1, 1)
    again = built.ask(question, AskOptions(threshold=1.5))  # the answer cache: one view, no gate, no model
    assert again.cache["answer"] is True and again.answer == first.answer
    assert (len(views), len(gates), spy.calls) == (2, 1, 1)
    refused = built.ask("How do I bake sourdough bread, counted?", AskOptions(threshold=0.01))
    assert refused.refused and (len(views), len(gates), spy.calls) == (3, 2, 1)
    built.search("service unit status")
    assert (len(views), len(gates)) == (4, 2)
