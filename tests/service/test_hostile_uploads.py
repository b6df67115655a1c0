"""Upload names that are paths (climbing, absolute, Windows, nested, encoded, control characters) name a document
and nothing else: the bytes are stored by content hash inside the home, nothing is written beside or above it.
Names that spoof what they show (bidi controls, invisible characters) are refused: test_security_names.py."""

from __future__ import annotations

from pathlib import Path

from live import live_server, wait_settled

from citerag.keystore.sqlite import SqliteKeyStore
from corpus_paths import DATA


def _everything(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_upload_names_are_names_never_paths(tmp_path: Path) -> None:
    home = tmp_path / "home"
    key = SqliteKeyStore(home).create(None, "admin")
    content = (DATA / "markdown" / "debian-reference" / "ch07.md").read_bytes()[:3000]  # a few chunks each
    names = {"../../../../tmp/escape-up.md": "escape-up.md", "/etc/escape-absolute.md": "escape-absolute.md",
             "..\\..\\escape-windows.md": "escape-windows.md", "a/b/../../../escape-mixed.md": "escape-mixed.md",
             "%2e%2e%2fescape-encoded.md": "%2e%2e%2fescape-encoded.md"}
    before = _everything(tmp_path)
    with live_server(home) as server, server.client(key) as api:
        ids = []
        for i, (given, kept) in enumerate(names.items()):
            body = content + f"\n\nVariant {i}.\n".encode()
            response = api.post("/v1/collections/default/documents", files=[("files", (given, body))])
            assert response.status_code == 202, response.text
            [doc] = response.json()["documents"]
            assert doc["name"] == kept
            ids.append(doc["id"])
        for bad in ("..", ".", "", "../../", "/", "evil\u202egpj.md", "zero\u200bwidth.md"):  # and invisible
            refused = api.post("/v1/collections/default/documents", files=[("files", (bad, b"# x\n\ny\n"))])
            assert refused.status_code == 422 and refused.json()["field"].startswith("files"), (bad, refused.text)
        assert {d["status"] for d in wait_settled(api, "default", ids)} == {"indexed"}
    created = _everything(tmp_path) - before
    assert all(p.startswith("home") for p in created), created  # nothing beside or above the home
    assert not any("escape" in p for p in created)  # stored by content hash, never by the name given
    assert all(len(p.name) == 64 for p in (home / "files").iterdir())
