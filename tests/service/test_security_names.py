"""Upload names a reader cannot trust are refused (issue 25, hole 10): bidi controls (`evil` U+202E `gpj.md` is
shown as `evildm.jpg`), zero-width and other invisible format characters, line separators and control
characters give a 422 naming the field (`files` for uploads, `file` for a replacement) before anything is stored;
names are kept in NFC, so the two spellings of "café.md" name one document."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

import httpx
import pytest
from live import LiveServer, live_server, wait_settled

from citerag.errors import CiteragError
from citerag.service.state import ServiceConfig

UPLOAD = "/v1/collections/default/documents"
NOTE = b"# Names\n\nA short note about file names that spoof their own extension.\n"
SPOOFS = ["evil\u202egpj.md", "\u202dreport.md", "\u202areport.md", "a\u2066b\u2069.md", "a\u2067b.md",
          "a\u2068b.md", "x\u200e.md", "x\u200f.md", "x\u061c.md", "zero\u200bwidth.md", "zw\u200cnj.md",
          "zw\u200dj.md", "word\u2060joiner.md", "\ufeffbom.md", "soft\u00adhyphen.md", "line\u2028sep.md",
          "para\u2029sep.md", "nel\x85.md", "tag\U000e0041.md", "mongolian\u180evs.md", "private\ue000.md"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    home = tmp_path_factory.mktemp("names") / "home"
    with live_server(home, ServiceConfig(keys_required=False)) as running:
        yield running


def _stored(server: LiveServer) -> set[str]:
    files = server.home / "files"
    return {p.name for p in files.rglob("*")} if files.exists() else set()


def _names(c: httpx.Client) -> list[str]:
    return [d["name"] for d in c.get(UPLOAD).json()["documents"]]


def _code(name: str) -> str:
    return f"U+{next(ord(ch) for ch in name if unicodedata.category(ch)[0] in 'CZ'):04X}"


@pytest.mark.parametrize("name", SPOOFS, ids=[_code(s) for s in SPOOFS])
def test_an_upload_name_with_invisible_or_bidi_characters_is_refused(server: LiveServer, name: str) -> None:
    with server.client() as c:
        before, listed = _stored(server), _names(c)
        for files in ([("files", (name, NOTE))], [("files", ("fine.md", NOTE)), ("files", (name, NOTE))]):
            refused = c.post(UPLOAD, files=files)
            assert refused.status_code == 422, (name, refused.text)
            body = refused.json()
            assert body["field"] == "files" and "file name" in body["error"], body
            assert not any(unicodedata.category(ch) in ("Cf", "Cc") for ch in body["error"]), body  # shown escaped
        assert _stored(server) == before and _names(c) == listed  # nothing of either request was kept


def test_a_replacement_with_such_a_name_is_refused_naming_file(server: LiveServer) -> None:
    with server.client() as c:
        uploaded = c.post(UPLOAD, files=[("files", ("replaced.md", NOTE))])
        assert uploaded.status_code == 202, uploaded.text
        (doc,) = uploaded.json()["documents"]
        wait_settled(c, "default", [doc["id"]])
        before = _stored(server)
        refused = c.put(f"{UPLOAD}/{doc['id']}", files={"file": ("replaced\u202edm.md", NOTE + b"\nNew.\n")})
        assert refused.status_code == 422 and refused.json()["field"] == "file", refused.text
        assert _stored(server) == before


def test_names_are_kept_in_nfc_and_both_spellings_name_one_document(server: LiveServer) -> None:
    decomposed, composed = "cafe\u0301.md", "caf\u00e9.md"
    with server.client() as c:
        first = c.post(UPLOAD, files=[("files", (decomposed, NOTE + b"\nCafe.\n"))])
        assert first.status_code == 202, first.text
        (doc,) = first.json()["documents"]
        assert doc["name"] == composed
        again = c.post(UPLOAD, files=[("files", (composed, NOTE + b"\nCafe.\n"))])
        assert again.status_code == 202, again.text
        assert again.json()["documents"][0]["id"] == doc["id"] and again.json()["documents"][0]["existed"]
        (settled,) = wait_settled(c, "default", [doc["id"]])
        assert settled["name"] == composed and settled["status"] == "indexed"


@pytest.mark.parametrize(("given", "kept"), [("notes.md", "notes.md"), ("../../x/notes.md", "notes.md"),
                                             ("C:\\Users\\a\\notes.md", "notes.md"), ("  spaced.md  ", "spaced.md"),
                                             ("Ｆｕｌｌ.md", "Ｆｕｌｌ.md"), ("日本語.md", "日本語.md"),
                                             ("ko\u1100\u1161.md", "ko\uac00.md")])
def test_the_name_rule_keeps_plain_names(given: str, kept: str) -> None:
    """The pure rule the routes (and the core) apply: a name, never a path, in NFC (not NFKC: full-width stays)."""
    from citerag.app.names import upload_name  # here, not at the top: the HTTP tests above ran before it existed

    assert upload_name(given) == kept


@pytest.mark.parametrize("given", ["", ".", "..", "/", "a/..", "  ", "x" * 256 + ".md", "tab\there.md", "del\x7f.md",
                                   "surrogate\udc80.md", *SPOOFS])
def test_the_name_rule_refuses_what_cannot_name_a_document(given: str) -> None:
    from citerag.app.names import upload_name

    with pytest.raises(CiteragError, match="file name"):
        upload_name(given)
