"""`citerag audit`: the home's trail as lines or JSON lines, filtered as the routes are; a bad value is one line
naming the option, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from audit_contract import seeded

from citerag.backends import open_backend
from citerag.settings import Settings
from cli_run import assert_one_line_error, run


def seed(home: Path, store_url: str = "") -> None:
    settings = Settings(index_dir=home, store_url=store_url)
    audit = open_backend(settings).audit(settings)
    try:
        seeded(audit)
    finally:
        audit.close()


def test_lines_newest_first_with_every_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seed(tmp_path)
    code, out, err = run(["audit", "--index", str(tmp_path)], capsys, monkeypatch)
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert len(lines) == 6
    assert lines[0] == f"2025-05-03T08:00:00Z  local  document.delete  default  {'d' * 32}  3  -"
    assert lines[1] == ('2025-05-03T08:00:00Z  key:admin000  key.create  -  -  -  '
                        '{"prefix": "bbbb2222", "scope": "read"}')
    assert lines[5] == f'2025-05-01T09:00:00Z  key:aaaa1111  search  default  {"a" * 32}  3,7  {{"status": 200}}'


def test_filters_and_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    seed(tmp_path)
    code, out, _ = run(["audit", "--index", str(tmp_path), "--collection", "hr", "--json"], capsys, monkeypatch)
    assert code == 0
    events = [json.loads(x) for x in out.splitlines()]
    assert [e["action"] for e in events] == ["document.groups", "ask"]
    assert events[0] == {"at": "2025-05-02T12:30:00Z", "principal": "key:admin000", "action": "document.groups",
                         "collection": "hr", "trace_id": None, "documents": [12], "detail": {"groups": ["hr", "sre"]}}
    assert "ünïcode" in out  # as written, not escaped
    for args, actions in [(["--principal", "user:alice"], ["ask", "document.read"]),
                          (["--action", "document"], ["document.delete", "document.groups", "document.read"]),
                          (["--document", "7"], ["document.read", "search"]),
                          (["--since", "2025-05-02", "--until", "2025-05-03"], ["document.groups", "ask"]),
                          (["--limit", "2"], ["document.delete", "key.create"])]:
        code, out, _ = run(["audit", "--index", str(tmp_path), "--json", *args], capsys, monkeypatch)
        assert code == 0 and [json.loads(x)["action"] for x in out.splitlines()] == actions, args
    code, out, err = run(["audit", "--index", str(tmp_path), "--collection", "nowhere"], capsys, monkeypatch)
    assert code == 0 and out == "" and err.strip() == "no audit events match"


@pytest.mark.parametrize(("args", "says"), [
    (["--since", "yesterday"], "--since: 'yesterday' is not an ISO 8601 time"),
    (["--until", "2025-02-30"], "--until: '2025-02-30' is not an ISO 8601 time"),
    (["--since", "2025-05-02", "--until", "2025-05-01"], "--until: until (2025-05-01T00:00:00Z) is before since"),
    (["--action", "delete"], "--action: 'delete' is not an action: expected one of search, ask"),
    (["--collection", "../x"], "--collection: '../x' is not a collection name"),
    (["--document", "0"], "--document: 0 is not a document id"),
    (["--document", "seven"], "--document: expected a whole number, not 'seven'"),
    (["--limit", "0"], "--limit: expected a whole number from 1 to 10000, not 0"),
    (["--limit", "many"], "--limit: expected a whole number, not 'many'"),
])
def test_a_bad_value_is_one_line_naming_the_option(args: list[str], says: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert_one_line_error(run(["audit", "--index", str(tmp_path), *args], capsys, monkeypatch), says)
    assert not (tmp_path / "audit.sqlite3").exists()


def test_a_home_without_a_trail_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run(["audit", "--index", str(tmp_path)], capsys, monkeypatch)
    assert (code, out, err.strip()) == (0, "", "no audit events match")
    seed(tmp_path)
    monkeypatch.setenv("CITERAG_AUDIT_RETENTION_DAYS", "0")
    code, out, err = run(["audit", "--index", str(tmp_path)], capsys, monkeypatch)
    assert code == 0 and out == "" and "the audit trail is off (audit_retention_days = 0)" in err


def test_a_postgresql_home(pg_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    seed(tmp_path, pg_url)
    monkeypatch.setenv("CITERAG_STORE_URL", pg_url)
    code, out, _ = run(["audit", "--index", str(tmp_path / "elsewhere"), "--action", "key"], capsys, monkeypatch)
    assert code == 0 and out.splitlines() == ['2025-05-03T08:00:00Z  key:admin000  key.create  -  -  -  '
                                              '{"prefix": "bbbb2222", "scope": "read"}']
