"""Crash consistency (issue 13): ingestion SIGKILLed at random moments, per store backend and entry point, over a
folder of 100 real documents with the real encoder; after every kill a fresh reader finds each document whole or
invisible, a replaced one still served whole at its previous version, and searches citing only what is served.
After the last kill the entry point runs to completion: every document indexed once, at its newest version, and
another run has nothing to do. The harness and the invariants: crash_harness.py.

The seed is printed; CITERAG_CRASH_SEED=N reruns a chain's kills in the same places (up to timing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crash_harness import (
    DOCUMENTS,
    SEED,
    TRIALS,
    Checker,
    CliEntry,
    Corpus,
    Entry,
    PostgresRows,
    ServiceEntry,
    SqliteRows,
    StoreRows,
    WorkerEntry,
    pg_home,
    run_chain,
    sqlite_home,
)

from citerag.settings import Settings


def test_the_trials_cover_what_the_issue_asks() -> None:
    assert DOCUMENTS == 100
    for backend, entries in TRIALS.items():
        assert sum(entries.values()) >= 20, backend
    assert set(TRIALS["sqlite"]) == {"cli", "service"}
    assert set(TRIALS["postgres"]) == {"cli", "service", "worker"}


def _chain(backend: str, entry_name: str, settings: Settings, rows: StoreRows, tmp_path: Path, encoder: Any) -> None:
    print(f"\ncrash seed {SEED} (CITERAG_CRASH_SEED), {backend}/{entry_name}: {TRIALS[backend][entry_name]} kills")
    corpus = Corpus(tmp_path / "docs", settings)
    logs = tmp_path / "logs"
    logs.mkdir()
    entry: Entry
    if entry_name == "cli":
        entry = CliEntry(settings.index_dir, corpus, logs)
    elif entry_name == "service":
        entry = ServiceEntry(settings.index_dir, corpus, logs)
    else:
        entry = WorkerEntry(settings.index_dir, corpus, logs, settings)
    checker = Checker(f"{backend}/{entry_name}", SEED, settings, corpus, entry.key, rows, encoder)
    try:
        figures = run_chain(backend, entry, checker, rows, corpus, TRIALS[backend][entry_name], SEED)
    finally:
        rows.close()
    print(figures.summary())
    assert len(figures.trials) == TRIALS[backend][entry_name]


@pytest.mark.parametrize("entry_name", sorted(TRIALS["sqlite"]))
def test_sqlite_ingestion_killed_at_random_moments_loses_nothing_and_shows_nothing_half(
        entry_name: str, tmp_path: Path, encoder: Any) -> None:
    settings = sqlite_home(tmp_path / "home")
    _chain("sqlite", entry_name, settings, SqliteRows(settings), tmp_path, encoder)


@pytest.mark.parametrize("entry_name", sorted(TRIALS["postgres"]))
def test_postgres_ingestion_killed_at_random_moments_loses_nothing_and_shows_nothing_half(
        entry_name: str, tmp_path: Path, encoder: Any, pg_url: str) -> None:
    # The CLI and the service on the default thread queue; the worker on procrastinate, with attempts enough that
    # random kills never use them up (the bound itself is tested in tests/workers).
    extra: dict[str, Any] = {"queue": "thread"} if entry_name != "worker" else {"queue_attempts": 100}
    settings = pg_home(tmp_path / "home", pg_url, **extra)
    _chain("postgres", entry_name, settings, PostgresRows(pg_url), tmp_path, encoder)


def test_a_replacement_accepted_just_before_the_service_is_killed_is_indexed_after_the_restart(tmp_path: Path) -> None:
    """The thread queue's journal: a PUT answered 202 and then a SIGKILL before the queue ran it. The document is
    indexed at its old version, so requeueing pending documents alone never found it (it stayed old, no error)."""
    import sqlite3
    from contextlib import closing

    from crash_harness import settle

    settings = sqlite_home(tmp_path / "home")
    corpus = Corpus(tmp_path / "docs", settings, count=3)
    (tmp_path / "logs").mkdir()
    entry = ServiceEntry(settings.index_dir, corpus, tmp_path / "logs")
    name = corpus.names[0]
    try:
        entry.start()
        settle(entry.behind, entry.output)
        old = corpus.latest(name).sha256
        corpus.replace(name, 1)
        entry.replaced([name])
        entry.kill()
        entry.start()  # PUTs the new version (202) ...
        entry.kill()  # ... and dies before its queue ran the job (the encoder alone takes longer to load)
        with closing(sqlite3.connect(settings.sqlite_dir / "index.sqlite3")) as db:
            assert db.execute("SELECT sha256 FROM documents WHERE name = ?", (name,)).fetchone() == (old,)
        entry.start()
        settle(entry.behind, entry.output)
    finally:
        entry.stop()


def test_the_check_fails_on_a_half_written_a_mixed_and_a_lost_document(tmp_path: Path, encoder: Any) -> None:
    """The invariants catch what they are there for: a store tampered with behind the indexer's back fails the
    check, naming the document and what disagreed."""
    import shutil
    import sqlite3
    from contextlib import closing

    from crash_harness import CrashViolation

    from citerag.app.home import Citerag

    clean = sqlite_home(tmp_path / "clean")
    corpus = Corpus(tmp_path / "docs", clean, count=3)
    app = Citerag()
    app.register_encoder(encoder)
    app.open_collection(clean, create=True).ingest([corpus.folder])
    app.close()
    first, second, third = corpus.names

    def tampered(case: str, *statements: tuple[str, tuple[Any, ...]]) -> Checker:
        """A copy of the clean index with `statements` run on it, and a checker that saw the clean one served."""
        home = tmp_path / case
        shutil.copytree(clean.index_dir, home)
        settings = sqlite_home(home)
        checker = Checker(case, 0, settings, corpus, lambda n: str((corpus.folder / n).resolve()),
                          SqliteRows(settings), encoder)
        checker.check("clean")
        with closing(sqlite3.connect(home / "index.sqlite3")) as db:
            for sql, args in statements:
                db.execute(sql, args)
            db.commit()
        return checker

    half = tampered("half", ("DELETE FROM chunks WHERE id = (SELECT max(c.id) FROM chunks c JOIN documents d"
                             " ON d.id = c.document_id WHERE d.name = ?)", (first,)))
    with pytest.raises(CrashViolation, match=rf"{first}.*HALF-VISIBLE"):
        half.check("half")
    mixed = tampered("mixed", ("UPDATE documents SET canonical_text = canonical_text || 'x' WHERE name = ?", (second,)))
    with pytest.raises(CrashViolation, match=rf"{second}.*HALF-VISIBLE.*none of its 1 versions"):
        mixed.check("mixed")
    lost = tampered("lost", ("UPDATE documents SET status = 'pending' WHERE name = ?", (third,)))
    with pytest.raises(CrashViolation, match=rf"{third}.*LOST: version 0 was served"):
        lost.check("lost")
