"""An upgrade never strands an index: a collection keeps the encoder its documents were indexed with when a newer
citerag changes the default, answers as before without a reindex, and its status says a newer default exists."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from citerag.app.home import Citerag
from citerag.app.models import EmptyCollection, SearchOptions
from citerag.settings import DEFAULT_ENCODER, Settings, load_settings

FIXTURE = Path(__file__).resolve().parent / "data" / "indexes" / "minilm-2026-11"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture()
def old_index(tmp_path: Path) -> Path:
    index = tmp_path / "index"
    shutil.copytree(FIXTURE / "index", index)
    return index


def test_the_fixture_was_built_with_the_old_default() -> None:
    assert EXPECTED["embedding_model"] == "all-MiniLM-L6-v2" != DEFAULT_ENCODER


def test_an_old_index_answers_with_default_settings_without_a_reindex(old_index: Path) -> None:
    with Citerag.open(load_settings(old_index)) as app:
        collection = app.collection()
        assert collection.settings.embedding_model == "all-MiniLM-L6-v2"
        for case in EXPECTED["questions"]:
            result = app.search(case["question"], SearchOptions(mode="dense", k=len(case["hits"])))
            got = [(c.document_name, c.fragment, round(h.cosine_distance, 6))
                   for h, c in zip(result.hits, result.citations, strict=True)]
            want = [(h["document_name"], h["fragment"], round(h["cosine_distance"], 6)) for h in case["hits"]]
            assert got[:4] == want[:4]
            assert [g[:2] for g in got] == [w[:2] for w in want]
        answer = app.ask(EXPECTED["questions"][0]["question"])
        assert not answer.refused and answer.citations[0].fragment == EXPECTED["questions"][0]["hits"][0]["fragment"]
        refused = app.ask(EXPECTED["refused"])
        assert refused.refused and refused.threshold == pytest.approx(EXPECTED["threshold"], abs=1e-3)
        status = app.status()
        # Stale for the pipeline version that changed since (reindex --stale would cut them anew), yet served.
        assert status.counts == {"indexed": 2, "failed": 0, "pending": 0, "stale": 2}
        assert status.refusal is not None and status.refusal.rule == "calibrated"
        assert status.newer_defaults == {"embedding_model": ("all-MiniLM-L6-v2", DEFAULT_ENCODER)}
        assert "a newer default exists: embedding_model" in status.notes[0]


def test_an_explicit_choice_still_wins_and_a_new_collection_takes_the_new_default(old_index: Path,
                                                                                    tmp_path: Path) -> None:
    with Citerag.open(Settings(index_dir=old_index, embedding_model=DEFAULT_ENCODER)) as app:
        assert app.collection().settings.embedding_model == DEFAULT_ENCODER
        assert app.status().newer_defaults == {}
        with pytest.raises(EmptyCollection, match="reindex --stale"):  # as before: nothing indexed with it
            app.search("How do I change my password?")
    with Citerag.open(Settings(index_dir=tmp_path / "new"), create=True) as app:
        assert app.collection().settings.embedding_model == DEFAULT_ENCODER


def test_citerag_status_says_a_newer_default_exists(old_index: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "citerag.cli", "status", "--index", str(old_index)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "a newer default exists: embedding_model = 'minilm+use'" in done.stdout


def test_a_collection_keeps_its_chunking_and_only_the_parameters_its_strategy_uses(tmp_path: Path) -> None:
    from fakes import HashEncoder

    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(Path(__file__).resolve().parent / "data" / "markdown" / "debian-reference" / "apa.md", docs)
    encoder = HashEncoder()
    with Citerag() as app:
        app.register_encoder(encoder)
        app.open_collection(Settings(index_dir=tmp_path / "ix", embedding_model=encoder.name, strategy="C",
                                     target=256), create=True)
        assert app.ingest([docs]).indexed
    with Citerag.open(load_settings(tmp_path / "ix")) as app:
        kept = app.collection().settings
        assert (kept.embedding_model, kept.strategy, kept.target, kept.overlap) == (encoder.name, "C", 256, 64)
        assert app.status().newer_defaults == {"embedding_model": (encoder.name, DEFAULT_ENCODER),
                                               "strategy": ("C", "E"), "target": (256, 512)}
        assert app.status().counts["stale"] == 0
    with Citerag.open(load_settings(tmp_path / "ix", strategy="E")) as app:  # a flag is an explicit choice
        assert app.collection().settings.strategy == "E" and app.status().counts["stale"] == 1


# --- document ids are never reused (issue 25): a link, trace or feedback for a deleted document must not open
# another. The embedded store gives ids from a high-water counter (meta `next_document_id`), which an index that
# predates it seeds once, in its first write, from every id it has known.


def _meta(index: Path) -> dict[str, str]:
    import sqlite3

    db = sqlite3.connect(index / "index.sqlite3")
    try:
        return dict(db.execute("SELECT key, value FROM meta WHERE key NOT LIKE 'refusal_rule:%'").fetchall())
    finally:
        db.close()


def test_an_old_home_never_gives_a_deleted_documents_id_again(old_index: Path) -> None:
    from citerag.ingest.files import Source
    from citerag.types import UPLOAD_SCHEME

    assert "next_document_id" not in _meta(old_index)  # written before the counter existed
    with Citerag.open(load_settings(old_index)) as app:
        collection = app.collection()
        highest = max(d.id for d in collection.documents())
        app.delete(highest)
        new = collection.accept(Source(UPLOAD_SCHEME + "new.md", b"# New\n\nFresh text.\n", "new.md")).document
        assert new.id > highest
        assert [d.name for d in collection.documents()] == ["ch04.md", "new.md"]
    assert _meta(old_index)["next_document_id"] == str(new.id + 1)
    with Citerag.open(load_settings(old_index)) as app:  # opened again: the counter holds
        app.delete(new.id)
        again = app.collection().accept(Source(UPLOAD_SCHEME + "again.md", b"# Again\n", "again.md")).document
        assert again.id > new.id
        assert app.status().counts["indexed"] == 1  # the old document still served


def test_ids_deleted_before_the_counter_existed_are_not_given_again(tmp_path: Path) -> None:
    import sqlite3

    from citerag.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "ix", create=True)
    ids = [store.add_pending(f"/docs/{n}.md", f"{n}.md", "0" * 64) for n in ("a", "b", "c")]
    store.delete(ids[-1])
    store.close()
    # As an older citerag left it: no counter, the deleted highest id known only to the change log.
    db = sqlite3.connect(tmp_path / "ix" / "index.sqlite3")
    db.execute("DELETE FROM meta WHERE key = 'next_document_id'")
    db.commit()
    store = SqliteStore(tmp_path / "ix")
    try:
        assert store.add_pending("/docs/d.md", "d.md", "0" * 64) == ids[-1] + 1
        # A document an older citerag added past the counter (it takes max(id) + 1) is not handed out twice.
        next_id = int(_meta(tmp_path / "ix")["next_document_id"])
        db.execute("INSERT INTO documents (id, source_path, name, sha256, status, updated_at)"
                   " VALUES (?, '/docs/old.md', 'old.md', ?, 'pending', 'now')", (next_id, "0" * 64))
        db.commit()
        assert store.add_pending("/docs/e.md", "e.md", "0" * 64) == next_id + 1
    finally:
        store.close()
        db.close()
