"""The audit trail's contract on both backends (HOME/audit.sqlite3 and a real PostgreSQL's audit_events), plus what
is particular to each: the file is created by the first record and never by a read, the table by the migrations;
a home with audit_retention_days = 0 keeps nothing; the event helper and the setting."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from audit_contract import AuditContract, MakeLog

from citerag.audit.base import ACTIONS, FAMILIES, AuditLog, AuditQuery, NoAudit, event
from citerag.audit.sqlite import FILE_NAME, SqliteAuditLog
from citerag.backends import open_backend
from citerag.settings import Settings, SettingsError, load_settings


def open_audit(settings: Settings) -> AuditLog:
    """The home's audit trail, as its backend bundle makes it."""
    return open_backend(settings).audit(settings)


class TestSqliteAudit(AuditContract):
    @pytest.fixture()
    def make(self, tmp_path: Path) -> MakeLog:
        def make(retention_days: float = 90) -> AuditLog:
            audit = open_audit(Settings(index_dir=tmp_path / "home", audit_retention_days=retention_days))
            assert isinstance(audit, SqliteAuditLog) and audit.path == (tmp_path / "home" / FILE_NAME).resolve()
            return audit

        return make

    @pytest.fixture(params=["not-a-database", "a-folder"])
    def broken(self, request: pytest.FixtureRequest, tmp_path: Path) -> AuditLog:
        home = tmp_path / "home"
        home.mkdir()
        if request.param == "not-a-database":  # a file some other program overwrote
            (home / FILE_NAME).write_bytes(b"\x00garbage" * 512)
        else:  # something else where the file should be (root ignores a read-only file's mode; this it cannot)
            (home / FILE_NAME).mkdir()
        return open_audit(Settings(index_dir=home))


class TestPostgresAudit(AuditContract):
    @pytest.fixture()
    def make(self, pg_url: str, tmp_path: Path) -> Iterator[MakeLog]:
        opened: list[AuditLog] = []

        def make(retention_days: float = 90) -> AuditLog:
            opened.append(open_audit(Settings(index_dir=tmp_path, store_url=pg_url,
                                              audit_retention_days=retention_days)))
            return opened[-1]

        yield make
        for audit in opened:
            audit.close()

    @pytest.fixture(params=["nothing-listening", "table-dropped"])
    def broken(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AuditLog]:
        if request.param == "nothing-listening":
            with socket.socket() as s:  # a port just free: connections to it are refused at once
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            url = f"postgresql://citerag@127.0.0.1:{port}/nowhere"
        else:
            import psycopg

            url = request.getfixturevalue("pg_url")
            with psycopg.connect(url, autocommit=True) as conn:  # migrated, then the table gone (a bad restore)
                from citerag.store.pg_migrate import migrate

                migrate(conn)
                conn.execute("DROP TABLE audit_events")
        audit = open_audit(Settings(index_dir=tmp_path, store_url=url))
        yield audit
        audit.close()


def test_the_sqlite_file_is_made_by_the_first_record_never_by_a_read(tmp_path: Path) -> None:
    audit = open_audit(Settings(index_dir=tmp_path / "home"))
    assert audit.query(collection="default") == [] and audit.sweep(1) == 0
    assert not (tmp_path / "home").exists()
    audit.record(event("local", "search", "default"))
    assert (tmp_path / "home" / FILE_NAME).is_file()
    with sqlite3.connect(tmp_path / "home" / FILE_NAME) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert {"audit_events_by_collection", "audit_events_by_principal"} <= indexes


def test_a_home_that_is_a_file_drops_events_and_reads_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.write_text("not a folder")
    audit = open_audit(Settings(index_dir=home))
    audit.record(event("local", "key.create"))
    assert isinstance(audit, SqliteAuditLog) and audit.dropped == 1
    assert audit.query() == []  # nothing there to read


def test_the_postgres_table_has_its_indexes(pg_url: str, tmp_path: Path) -> None:
    import psycopg

    audit = open_audit(Settings(index_dir=tmp_path, store_url=pg_url))
    try:
        audit.record(event("local", "search", "default", None, [1]))
    finally:
        audit.close()
    with psycopg.connect(pg_url) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'audit_events'")}
        kinds = dict(conn.execute("SELECT column_name, data_type FROM information_schema.columns"
                                  " WHERE table_name = 'audit_events'").fetchall())
    assert {"audit_events_by_collection", "audit_events_by_principal"} <= indexes
    assert kinds["at"] == "timestamp with time zone" and kinds["documents"] == "ARRAY" and kinds["detail"] == "jsonb"


@pytest.mark.parametrize("postgres", [False, True])
def test_retention_zero_keeps_no_trail(postgres: bool, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue("pg_url") if postgres else ""
    audit = open_audit(Settings(index_dir=tmp_path / "home", store_url=url, audit_retention_days=0))
    assert isinstance(audit, NoAudit) and audit.retention_days == 0
    audit.record(event("local", "search", "default"))
    assert audit.query() == [] and audit.sweep(0) == 0
    assert not (tmp_path / "home").exists()
    with pytest.raises(Exception, match="action"):  # the same refusals as a trail that keeps events
        audit.query(action="nothing")


def test_the_event_helper_stamps_now_and_knows_its_actions() -> None:
    made = event("key:ab12cd34", "document.groups", "hr", "f" * 32, iter([3, 4]), groups=["sre"])
    assert made.documents == (3, 4) and made.detail == {"groups": ["sre"]} and made.collection == "hr"
    assert len(made.at) == 20 and made.at.endswith("Z") and made.at == AuditQuery.parse(since=made.at).since
    assert event("local", "search").detail == {} and event("local", "search").collection is None
    with pytest.raises(ValueError, match="unknown audit action 'serch'"):
        event("local", "serch")
    assert len(set(ACTIONS)) == len(ACTIONS) and set(FAMILIES) == {"collection", "document", "key", "session",
                                                                     "user"}


@pytest.mark.parametrize(("value", "expected"), [("true", "expected a number"),
                                                 ("-1", "must be >= 0"), ("nan", "finite"),
                                                 ("forever", "expected a number")])
def test_the_retention_setting_is_checked(value: str, expected: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().audit_retention_days == 90
    monkeypatch.setenv("CITERAG_AUDIT_RETENTION_DAYS", value)
    with pytest.raises(SettingsError, match=expected) as refused:
        load_settings(tmp_path)
    assert "CITERAG_AUDIT_RETENTION_DAYS" in str(refused.value)


def test_the_retention_setting_reads_from_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("audit_retention_days = 7.5\n")
    settings: Any = load_settings(tmp_path)
    assert settings.audit_retention_days == 7.5
    (tmp_path / "config.toml").write_text("audit_retention_days = true\n")
    with pytest.raises(SettingsError, match="audit_retention_days = True: expected a number, not true/false"):
        load_settings(tmp_path)
