"""API keys as stored and checked; the links and marker positions the server writes (no server needed)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from citerag.answer.citations import text_directive, typed_locator
from citerag.errors import CiteragError
from citerag.service.keys import KEYS_FILE, KeyStore
from citerag.service.present import citation_json, markers
from citerag.types import Citation


def test_a_key_is_shown_once_stored_as_a_hash_scoped_and_revocable(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path)
    token = keys.create("team", "read")
    assert token.startswith("crk_") and len(token) > 40
    stored = sqlite3.connect(tmp_path / KEYS_FILE).execute("SELECT * FROM keys").fetchall()
    assert len(stored) == 1 and token not in repr(stored) and token.split("_")[2] not in repr(stored)
    who = keys.verify(token)
    assert who is not None and who.collection == "team" and who.sees("team") and not who.sees("other")
    assert who.may("team", "read") and not who.may("team", "write")
    assert keys.verify(token[:-1] + ("A" if token[-1] != "A" else "B")) is None  # one character off
    assert keys.verify("crk_" + token.split("_")[1] + "_guess") is None
    assert keys.verify("not a key") is None
    admin = keys.verify(keys.create(None, "admin"))
    assert admin is not None and admin.server_admin and admin.sees("anything")
    with pytest.raises(CiteragError, match="server admin"):
        keys.create(None, "read")
    assert keys.revoke(token.split("_")[1]) and keys.verify(token) is None


def test_keys_cli_creates_lists_and_revokes(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "citerag.cli", "keys", *args, "--index", str(tmp_path)],
                              capture_output=True, text=True, timeout=60)

    missing = cli("create", "--collection", "nope", "--scope", "read")
    assert missing.returncode == 1 and "no collection 'nope'" in missing.stderr and missing.stderr.count("\n") == 1
    made = cli("create", "--collection", "default", "--scope", "write")
    token = made.stdout.strip()
    assert made.returncode == 0 and token.startswith("crk_") and "not shown again" in made.stderr
    listed = cli("list")
    assert token.split("_")[1] in listed.stdout and token not in listed.stdout and "write" in listed.stdout
    assert cli("revoke", "crk_" + token.split("_")[1]).returncode == 0
    assert KeyStore(tmp_path).verify(token) is None


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
