"""API keys as stored and checked, on both backends (HOME/keys.sqlite3 and a real PostgreSQL's api_keys); the
links and marker positions the server writes (no server needed)."""

from __future__ import annotations

import hashlib
import hmac
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

import citerag.keystore.base as keystore
from citerag.answer.citations import text_directive, typed_locator
from citerag.backends import open_backend
from citerag.errors import CiteragError, StoreUnavailable
from citerag.keystore.base import KeyStore
from citerag.keystore.postgres import PostgresKeyStore
from citerag.keystore.sqlite import KEYS_FILE, SqliteKeyStore
from citerag.service.present import citation_json, markers
from citerag.settings import Settings
from citerag.types import Citation


@dataclass
class Backend:
    """One key-store backend under test: `open()` is a new store on the same keys (as another process or machine
    opens them), `rows()` what the database holds, `sql(statement)` a statement run on it directly (rows back),
    `sessions` the name of its sessions table."""

    name: str
    open: Callable[[], KeyStore]
    rows: Callable[[], list[tuple[Any, ...]]]
    settings: Settings
    sql: Callable[[str], list[tuple[Any, ...]]]
    sessions: str


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    opened: list[KeyStore] = []
    if request.param == "sqlite":
        settings = Settings(index_dir=tmp_path)

        def sql(statement: str) -> list[tuple[Any, ...]]:
            with closing(sqlite3.connect(tmp_path / KEYS_FILE)) as db, db:
                return db.execute(statement).fetchall()

        def rows() -> list[tuple[Any, ...]]:
            return sqlite3.connect(tmp_path / KEYS_FILE).execute("SELECT * FROM keys").fetchall()
        sessions = "sessions"
    else:
        import psycopg

        url = request.getfixturevalue("pg_url")
        settings = Settings(index_dir=tmp_path, store_url=url)

        def sql(statement: str) -> list[tuple[Any, ...]]:
            with psycopg.connect(url) as conn:
                cursor = conn.execute(statement)
                return cursor.fetchall() if cursor.description else []

        def rows() -> list[tuple[Any, ...]]:
            with psycopg.connect(url) as conn:
                return conn.execute("SELECT * FROM api_keys").fetchall()
        sessions = "api_sessions"

    def open_store() -> KeyStore:
        opened.append(open_backend(settings).key_store(settings))
        return opened[-1]

    yield Backend(request.param, open_store, rows, settings, sql, sessions)
    for store in opened:
        store.close()


def test_a_key_is_shown_once_stored_as_a_hash_scoped_and_revocable(backend: Backend) -> None:
    keys = backend.open()
    token = keys.create("team", "read")
    assert token.startswith("crk_") and len(token) > 40
    stored = backend.rows()
    assert len(stored) == 1 and token not in repr(stored) and token.split("_", 2)[2] not in repr(stored)
    assert hashlib.sha256(token.encode()).hexdigest() in repr(stored)
    who = keys.verify(token)
    assert who is not None and who.collection == "team" and who.sees("team") and not who.sees("other")
    assert who.key == token.split("_")[1]
    assert who.may("team", "read") and not who.may("team", "write")
    assert keys.verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None  # one character off
    assert keys.verify("crk_" + token.split("_")[1] + "_guess") is None
    assert keys.verify("not a key") is None and keys.verify("") is None
    admin = keys.verify(keys.create(None, "admin"))
    assert admin is not None and admin.server_admin and admin.sees("anything")
    with pytest.raises(CiteragError, match="server admin"):
        keys.create(None, "read")
    with pytest.raises(CiteragError, match="scope 'owner'"):
        keys.create("team", "owner")
    assert keys.revoke(token.split("_")[1]) and keys.verify(token) is None
    assert not keys.revoke(token.split("_")[1])


def test_keys_are_listed_without_the_key_and_shared_by_every_store_on_them(backend: Backend) -> None:
    first, second = backend.open(), backend.open()  # two API processes (two machines, for PostgreSQL)
    tokens = [first.create("team", "write"), first.create(None, "admin")]
    listed = second.list()
    assert sorted(k.prefix for k in listed) == sorted(t.split("_")[1] for t in tokens)
    assert {(k.collection, k.scope) for k in listed} == {("team", "write"), (None, "admin")}
    assert all(k.created_at.endswith("+00:00") for k in listed) and tokens[0] not in repr(listed)
    assert listed == sorted(listed, key=lambda k: (k.created_at, k.prefix))
    assert [second.verify(t) is not None for t in tokens] == [True, True]
    assert second.revoke(tokens[0].split("_")[1]) and first.verify(tokens[0]) is None  # revoked everywhere at once


def test_users_groups_and_their_keys_and_sessions(backend: Backend) -> None:
    """Issue 30's principals: a user's key reads with the user's groups as they are at each request; a service key
    with its own; a key with neither with none; an admin of a collection sees every document."""
    first, second = backend.open(), backend.open()
    alice = first.put_user("alice", ["sre", "oncall", "sre"])
    assert alice.groups == ("sre", "oncall") and alice.origin == "local"
    with pytest.raises(CiteragError, match="no user 'bob'"):
        first.create("team", "read", user="bob")
    with pytest.raises(CiteragError, match="not both"):
        first.create("team", "read", user="alice", groups=["hr"])
    with pytest.raises(CiteragError, match="is not a group name"):
        first.put_user("carol", ["has space"])
    mine, service, plain = (first.create("team", "read", user="alice"), first.create("team", "write", groups=["hr"]),
                            first.create("team", "read"))
    admin = first.create("team", "admin")
    who = second.verify(mine)
    assert who is not None and who.user == "alice" and who.audience == {"sre", "oncall"} and who.who == "user:alice"
    assert second.verify(service).audience == {"hr"} and second.verify(plain).audience == frozenset()  # type: ignore[union-attr]
    assert second.verify(admin).audience is None  # type: ignore[union-attr]
    session = first.start_session(mine, 60)
    assert session is not None
    second.put_user("alice", ["hr"], origin="oidc")  # changed elsewhere: the next request reads with it
    assert first.verify(mine).audience == {"hr"} and first.verify_session(session).audience == {"hr"}  # type: ignore[union-attr]
    listed = {k.prefix: k for k in second.list()}
    assert listed[mine.split("_")[1]].user == "alice" and listed[service.split("_")[1]].groups == ("hr",)
    signed_in = first.start_user_session("alice", 60)
    assert signed_in is not None and first.start_user_session("nobody", 60) is None
    user = second.verify_session(signed_in)
    assert user is not None and user.user == "alice" and user.collection is None and user.scope == "read"
    assert user.audience == {"hr"} and user.sees("any") and not user.server_admin
    assert [u.name for u in second.users()] == ["alice"]
    assert second.remove_user("alice") and not second.remove_user("alice")
    # Its keys and every session go with it, in one transaction.
    assert first.verify(mine) is None and first.verify_session(session) is None
    assert first.verify_session(signed_in) is None and first.verify(service) is not None
    ended = first.start_user_session("alice", 60)
    assert ended is None
    first.put_user("dave", [])
    dave = first.start_user_session("dave", 60)
    assert dave is not None and first.end_session(dave) and first.verify_session(dave) is None


def test_a_keys_file_of_before_users_opens_and_its_keys_read_the_open_documents(tmp_path: Path) -> None:
    old = sqlite3.connect(tmp_path / "keys.sqlite3")  # as citerag wrote it before issue 30
    old.execute("CREATE TABLE keys (prefix TEXT PRIMARY KEY, digest TEXT NOT NULL, collection TEXT, "
                "scope TEXT NOT NULL, created_at TEXT NOT NULL)")
    token = "crk_0a1b2c3d_" + "k" * 32
    old.execute("INSERT INTO keys VALUES (?, ?, 'team', 'read', '2026-01-01T00:00:00+00:00')",
                ("0a1b2c3d", hashlib.sha256(token.encode()).hexdigest()))
    old.commit()
    old.close()
    keys = SqliteKeyStore(tmp_path)
    who = keys.verify(token)
    assert who is not None and who.collection == "team" and who.user is None and who.audience == frozenset()
    assert [k.prefix for k in keys.list()] == ["0a1b2c3d"]


def test_deleting_a_collection_revokes_its_keys_only(backend: Backend) -> None:
    keys = backend.open()
    doomed = [keys.create("team", "read"), keys.create("team", "admin")]
    kept = [keys.create("other", "read"), keys.create(None, "admin")]
    assert keys.revoke_collection("team") == 2 and keys.revoke_collection("team") == 0
    assert [keys.verify(t) for t in doomed] == [None, None]
    assert all(keys.verify(t) is not None for t in kept)


def test_a_key_is_compared_in_constant_time_even_when_no_key_has_its_prefix(backend: Backend,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    keys = backend.open()
    token = keys.create("team", "read")
    compared: list[tuple[str, str]] = []
    compare = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        compared.append((a, b))
        return compare(a, b)

    monkeypatch.setattr(keystore.hmac, "compare_digest", spy)
    assert keys.verify("crk_00000000_" + token.split("_", 2)[2]) is None  # no such prefix
    assert keys.verify("not a key") is None
    assert keys.verify(token) is not None
    assert len(compared) == 3 and all(len(a) == len(b) == 64 for a, b in compared)


def test_a_session_is_stored_as_a_hash_bound_to_its_key_and_shared_by_every_store(backend: Backend) -> None:
    first, second = backend.open(), backend.open()
    key = first.create("team", "write")
    session = first.start_session(key, 3600)
    assert session is not None and session.startswith("crs_") and key not in session
    stored = backend.sql(f"SELECT * FROM {backend.sessions}")
    assert len(stored) == 1 and session not in repr(stored) and key not in repr(stored)
    assert hashlib.sha256(session.encode()).hexdigest() in repr(stored)
    assert hashlib.sha256(key.encode()).hexdigest() in repr(stored)  # bound to this key, not just its prefix
    assert second.verify_session(session) == first.verify(key) == keystore.Principal(key.split("_")[1], "team",
                                                                                     "write")
    assert second.verify_session(session[:-1] + ("A" if session[-1] != "A" else "B")) is None
    assert [second.verify_session(t) for t in (key, "crs_", "crs_guess", "", "not a session")] == [None] * 5
    assert first.start_session("crk_00000000_guess", 3600) is None and first.start_session("", 3600) is None
    assert len(backend.sql(f"SELECT * FROM {backend.sessions}")) == 1  # a failed sign-in stores nothing
    assert second.end_session(session) and first.verify_session(session) is None  # logout: ended everywhere
    assert not second.end_session(session) and not second.end_session("crs_guess")
    assert first.verify(key) is not None  # logging out ends the session, not the key


def test_a_session_expires_and_ends_with_its_key_or_its_collection(backend: Backend) -> None:
    keys = backend.open()
    brief = keys.start_session(keys.create("team", "read"), 0.3)
    assert brief is not None and keys.verify_session(brief) is not None
    time.sleep(0.4)
    assert keys.verify_session(brief) is None
    key, kept_key = keys.create("team", "write"), keys.create("other", "read")
    one, two, kept = keys.start_session(key, 3600), keys.start_session(key, 3600), keys.start_session(kept_key, 3600)
    assert one and two and kept and len({one, two}) == 2  # each sign-in its own session
    assert keys.revoke(key.split("_")[1])
    assert keys.verify_session(one) is None and keys.verify_session(two) is None
    assert keys.start_session(key, 3600) is None  # a revoked key opens no new one
    in_team = keys.start_session(keys.create("team", "admin"), 3600)
    assert in_team is not None and keys.revoke_collection("team") == 2
    assert keys.verify_session(in_team) is None and keys.verify_session(kept) is not None
    # Nothing of an ended or expired session is left behind (the expired one is swept by the next sign-in).
    assert len(backend.sql(f"SELECT * FROM {backend.sessions}")) == 1


def test_a_key_store_written_before_sessions_gets_their_table_on_open(backend: Backend) -> None:
    key = backend.open().create("team", "read")  # as an older citerag left the database: keys, no sessions
    backend.sql(f"DROP TABLE {backend.sessions}")
    keys = backend.open()
    assert keys.verify(key) is not None
    session = keys.start_session(key, 3600)
    assert session is not None and keys.verify_session(session) is not None


def test_the_home_store_chooses_where_keys_live(backend: Backend, tmp_path: Path) -> None:
    keys = backend.open()
    if backend.name == "sqlite":
        assert isinstance(keys, SqliteKeyStore) and keys.path == tmp_path / KEYS_FILE
        assert keys.list() == [] and keys.verify("crk_00000000_x") is None
        assert not (tmp_path / KEYS_FILE).exists()  # reading creates nothing
    else:
        assert isinstance(keys, PostgresKeyStore) and keys.list() == []  # the schema is applied on first use
        keys.create(None, "admin")
        assert not (tmp_path / KEYS_FILE).exists()  # nothing on this machine's disk


def test_an_unreachable_key_database_is_store_unavailable() -> None:
    keys = PostgresKeyStore("postgresql://postgres@127.0.0.1:1/nothing", "postgresql://127.0.0.1:1/nothing")
    with pytest.raises(StoreUnavailable, match="cannot reach the API keys in postgresql://127.0.0.1:1/nothing"):
        keys.verify("crk_00000000_x")
    keys.close()


def _key_store(settings: Settings) -> KeyStore:
    return open_backend(settings).key_store(settings)


def _keys_cli(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "citerag.cli", "keys", *args, "--index", str(home)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


def test_keys_cli_creates_lists_and_revokes(tmp_path: Path) -> None:
    missing = _keys_cli(tmp_path, "create", "--collection", "nope", "--scope", "read")
    assert missing.returncode == 1 and "no collection 'nope'" in missing.stderr and missing.stderr.count("\n") == 1
    made = _keys_cli(tmp_path, "create", "--collection", "default", "--scope", "write")
    token = made.stdout.strip()
    assert made.returncode == 0 and token.startswith("crk_") and "not shown again" in made.stderr
    listed = _keys_cli(tmp_path, "list")
    assert token.split("_")[1] in listed.stdout and token not in listed.stdout and "write" in listed.stdout
    assert _keys_cli(tmp_path, "revoke", "crk_" + token.split("_")[1]).returncode == 0
    assert SqliteKeyStore(tmp_path).verify(token) is None


def test_keys_cli_on_a_postgresql_home_serves_every_machine(pg_url: str, tmp_path: Path) -> None:
    # Two machines: each its own home folder, one database (CITERAG_STORE_URL, as deploy/compose.yaml sets it).
    env = {"CITERAG_STORE_URL": pg_url}
    one, two = tmp_path / "one", tmp_path / "two"
    made = _keys_cli(one, "create", "--scope", "admin", env=env)
    token = made.stdout.strip()
    assert made.returncode == 0 and token.startswith("crk_"), made.stderr
    listed = _keys_cli(two, "list", env=env)
    assert listed.returncode == 0 and token.split("_")[1] in listed.stdout and token not in listed.stdout
    with closing(_key_store(Settings(index_dir=two, store_url=pg_url))) as keys:
        assert keys.verify(token) is not None
    assert _keys_cli(two, "revoke", token.split("_")[1], env=env).returncode == 0
    with closing(_key_store(Settings(index_dir=one, store_url=pg_url))) as keys:
        assert keys.verify(token) is None
    assert not (one / KEYS_FILE).exists() and not (two / KEYS_FILE).exists()


def test_text_directive_takes_whole_words_from_each_end_and_escapes_its_syntax() -> None:
    quote = "Run apt-get update, then\nupgrade & reboot.\n\nThe last line has seven words in it."
    directive = text_directive(quote)
    assert directive.startswith("#:~:text=") and "-" not in directive[len("#:~:text="):].replace("%2D", "")
    start, end = directive[len("#:~:text="):].split(",")
    assert unquote(start) == "Run apt-get update, then" and unquote(end) == "line has seven words in it."
    assert text_directive("One short line.") == "#:~:text=One%20short%20line."


def _citation(fragment: str, name: str = "doc.pdf") -> Citation:
    return Citation(1, 7, name, "/x/" + name, "p. 3", fragment, 10, 50, "quoted words here", 0.25, section="Intro")


def test_typed_locators_and_hrefs() -> None:
    assert typed_locator(_citation("#page=3")) == {"type": "page", "page": 3, "char_start": 10, "char_end": 50}
    assert typed_locator(_citation("#t=12.5,20")) == {"type": "time", "start": 12.5, "end": 20.0,
                                                      "char_start": 10, "char_end": 50}
    assert typed_locator(_citation("#sheet=My%20Sheet&range=A2:C2"))["sheet"] == "My Sheet"
    assert typed_locator(_citation("#char=10,50")) == {"type": "char", "start": 10, "end": 50}
    pdf = citation_json("team a", _citation("#page=3"))
    assert pdf["href"] == "/v1/collections/team%20a/documents/7/file#page=3"
    assert pdf["text_href"] == "/v1/collections/team%20a/documents/7/view#char=10,50" and "source_path" not in pdf
    html = citation_json("c", _citation("#char=10,50", "page.html"))
    assert html["href"] == "/v1/collections/c/documents/7/file#:~:text=quoted%20words%20here"


def test_marker_positions_in_code_points() -> None:
    text = "Größe ● matters [1]. Both [2, 3] say so; [x] is not one."
    found = markers(text)
    assert [m["index"] for m in found] == [1, 2, 3]
    assert text[found[0]["start"]:found[0]["end"]] == "[1]"
    assert text[found[1]["start"]:found[1]["end"]] == "[2, 3]" == text[found[2]["start"]:found[2]["end"]]
