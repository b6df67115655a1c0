"""The collection-name rule of the application core (issue 25): one rule for the CLI and the API, checked wherever a
name reaches a folder or a row, so that `..`, `.` and their kind are one clear line and never a path; and a create
that fails, for any reason, leaves nothing behind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import citerag.app.home as home_module
from citerag.app.home import COLLECTION_NAME, Citerag, check_collection_name
from citerag.errors import CiteragError
from citerag.settings import Settings

PATH_NAMES = ["..", ".", ".hidden", "team.", "a/b", "..\\x", "team\n", "", "x" * 65]
GOOD_NAMES = ["default", "other", "team", "a.b_c", "beta-2", "Alpha", "x" * 64, "7"]


def _files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() if p.is_file() else b"<folder>"
            for p in sorted(home.rglob("*")) if "search" not in p.relative_to(home).parts}


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_the_rule_keeps_every_name_in_use(name: str) -> None:
    assert check_collection_name(name) == name and re.fullmatch(COLLECTION_NAME, name)


@pytest.mark.parametrize("name", PATH_NAMES)
def test_the_rule_refuses_what_a_path_could_read(name: str) -> None:
    with pytest.raises(CiteragError, match=r"^bad collection name .*not ending with '\.'$"):
        check_collection_name(name)


def test_the_apis_pattern_is_the_core_rule() -> None:
    from citerag.service import schemas

    assert schemas.COLLECTION_NAME is COLLECTION_NAME


@pytest.fixture()
def app(tmp_path: Path) -> Citerag:
    home = tmp_path / "home"
    made = Citerag.open_home(Settings(index_dir=home, embedding_model="hash-64"))
    (home / "config.toml").write_text("threshold = 0.5\n", encoding="utf-8")
    return made


def test_a_bad_name_is_one_line_everywhere_in_the_core_and_writes_nothing(app: Citerag) -> None:
    home = app.collection().settings.index_dir
    before = _files(home)
    for name in PATH_NAMES:
        if not name:
            continue  # `collection("")` is the default collection
        with pytest.raises(CiteragError, match="^bad collection name"):
            app.create_collection(name, {"threshold": 1.9})
        with pytest.raises(CiteragError, match="^bad collection name"):
            app.collection(name)
        with pytest.raises(CiteragError, match="^bad collection name"):
            app.drop_collection(name)
    with pytest.raises(ValidationError, match="collection"):  # settings (a config file, CITERAG_COLLECTION) refuse it
        Settings(index_dir=home / "elsewhere", collection="..")
    with pytest.raises(CiteragError, match="^bad collection name"):  # and settings built past validation too
        app.open_collection(Settings.model_construct(index_dir=home / "elsewhere", collection=".."))
    assert _files(home) == before and app.collection_names() == ["default"]
    app.close()


def test_a_create_that_fails_when_opening_leaves_no_collection(app: Citerag, monkeypatch: pytest.MonkeyPatch) -> None:
    home = app.collection().settings.index_dir
    before = _files(home)

    def broken(*args: object) -> object:
        raise CiteragError("the store could not be opened")

    monkeypatch.setattr(home_module, "keep_indexed_choices", broken)
    with pytest.raises(CiteragError, match="could not be opened"):
        app.create_collection("team", {"k": 3})
    monkeypatch.undo()
    # Nothing of it: its folder and store gone (the empty HOME/collections/ that holds collections may stay).
    after = {k: v for k, v in _files(home).items() if k != "collections" or any((home / k).iterdir())}
    assert app.collection_names() == ["default"] and after == before
    assert app.create_collection("team", {"k": 3}).settings.k == 3  # the name is free again
    app.close()


def test_the_cli_refuses_a_bad_collection_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "citerag.cli", "keys", "create", "--index", str(tmp_path / "home"),
                           "--collection", "..", "--scope", "read"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.startswith("error: bad collection name '..'") and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "home" / "keys.sqlite3").exists() or done.stdout == ""
