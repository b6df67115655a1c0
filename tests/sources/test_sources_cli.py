"""`citerag sources` at the terminal: a Git repository (file://) and a website (a real HTTP server on loopback)
added, synced, shown, listed and removed, as the README's tour does; and every bad input one line, no traceback.
The documents are XQuAD articles (CC-BY-SA 4.0, eval/xquad-en) and a Debian Reference page (its LICENSE)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.app.home import Citerag
from citerag.app.models import Filters, SearchOptions
from citerag.settings import Settings
from cli_run import assert_one_line_error, run
from corpus_paths import DEV_CORPUS, ROOT
from system_tools import require_git
from upstreams import Site, commit_all, git, page

XQUAD = ROOT / "eval" / "xquad-en" / "corpus"


@pytest.fixture()
def site(tmp_path: Path) -> Iterator[Site]:
    docs = tmp_path / "site" / "manual"
    docs.mkdir(parents=True)
    shutil.copy(DEV_CORPUS / "apa.en.html", docs / "apa.en.html")
    (docs / "index.html").write_text(page("Manual", ["apa.en.html"]))
    served = Site(tmp_path / "site")
    yield served
    served.server.shutdown()
    served.server.server_close()


def test_a_repository_and_a_website_synced_at_the_terminal(
        tmp_path: Path, site: Site, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    require_git()
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shutil.copy(XQUAD / "Packet_switching.txt", repo / "docs" / "packets.md")
    (repo / "notes.txt").write_text("Not under docs/: left out by the glob.\n")
    head = commit_all(repo, "first")
    ix = ["--index", str(tmp_path / "ix")]
    code, out, err = run(["sources", "add", "handbook", "--git", f"file://{repo}", "--path", "docs/**/*.md",
                          "--link", "https://forge.example/handbook/blob/{commit}/{path}", *ix], capsys, monkeypatch)
    assert code == 0 and out.startswith("added git source handbook"), err
    code, out, err = run(["sources", "add", "manual", "--web", site.url("/manual/index.html"), "--every", "6h", *ix],
                         capsys, monkeypatch)
    assert code == 0 and "every 21600 s" in out, err
    code, out, err = run(["sources", "sync", "handbook", *ix], capsys, monkeypatch)
    assert code == 0, err
    assert out.strip() == "handbook: 1 added, 0 changed, 0 removed, 0 unchanged, 0 failed (1 fetched)"
    code, out, err = run(["sources", "sync", "manual", "--json", *ix], capsys, monkeypatch)
    report = json.loads(out)
    assert code == 0 and (report["added"], report["complete"], report["error"]) == (2, True, None), err
    code, out, _ = run(["sources", "show", "handbook", "--json", *ix], capsys, monkeypatch)
    shown = json.loads(out)
    assert shown["commit"] == head and shown["documents"] == 1 and shown["last"]["added"] == 1
    assert shown["next_run"] is None and shown["last_error"] is None
    code, out, _ = run(["sources", "list", *ix], capsys, monkeypatch)
    assert code == 0 and [line.split()[:2] for line in out.splitlines()] == [["handbook", "git"], ["manual", "web"]]
    code, out, _ = run(["ask", "What is the name of the first packet switched network?", "--json", *ix],
                       capsys, monkeypatch)
    cited = json.loads(out)["citations"][0]
    assert code == 0 and cited["source_path"] == "source:handbook:docs/packets.md"
    assert cited["live_url"] == f"https://forge.example/handbook/blob/{head}/docs/packets.md"  # the --link template
    code, out, _ = run(["status", *ix], capsys, monkeypatch)
    assert "source:manual:" + site.url("/manual/apa.en.html") in out
    code, out, _ = run(["sources", "remove", "manual", *ix], capsys, monkeypatch)
    assert code == 0 and out.strip() == "removed source manual and its 2 documents"
    code, out, _ = run(["status", *ix], capsys, monkeypatch)
    assert "source:manual:" not in out and "source:handbook:docs/packets.md" in out


def test_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    ix = ["--index", str(tmp_path / "ix")]

    def refused(pattern: str, *args: str) -> None:
        assert_one_line_error(run(["sources", *args, *ix], capsys, monkeypatch), pattern)

    folder = str(tmp_path)
    refused("give one of --folder PATH, --git URL or --web URL", "add", "x")
    refused("give one of", "add", "x", "--folder", folder, "--web", "http://a/")
    refused("source name 'Bad Name'", "add", "Bad Name", "--folder", folder)
    refused("absolute path", "add", "x", "--folder", "relative/path")
    refused("http:// or https://", "add", "x", "--web", "ftp://example.org/")
    refused("--every 'soon'", "add", "x", "--folder", folder, "--every", "soon")
    refused("is not a cron expression", "add", "x", "--folder", folder, "--cron", "every day")
    refused("a folder source takes no option 'sitemap'", "add", "x", "--folder", folder, "--sitemap", "http://a/s")
    assert run(["sources", "add", "x", "--folder", folder, "--cron", "0 3 * * *", *ix], capsys, monkeypatch)[0] == 0
    refused("exists", "add", "x", "--folder", folder)
    for command in ("sync", "show", "remove"):
        refused("no source 'nope'", command, "nope")
    gone = tmp_path / "gone"
    assert run(["sources", "add", "gone", "--folder", str(gone), *ix], capsys, monkeypatch)[0] == 0
    refused("is not there", "sync", "gone")
    code, out, _ = run(["sources", "show", "gone", "--json", *ix], capsys, monkeypatch)
    shown = json.loads(out)
    assert shown["failures"] == 1 and "is not there" in shown["last_error"] and shown["next_run"]  # backed off


def test_a_folders_tag_rules_tag_its_documents_for_filtered_questions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules GLOB=TAG tag each document as it is synced; a filter on a tag then searches those documents only, and a
    document that moves out of a rule's glob loses its tag at the next sync."""
    folder = tmp_path / "share"
    (folder / "runbooks").mkdir(parents=True)
    shutil.copy(XQUAD / "Packet_switching.txt", folder / "runbooks" / "packets.md")
    shutil.copy(XQUAD / "Apollo_program.txt", folder / "apollo.md")
    ix = ["--index", str(tmp_path / "ix")]
    code, out, err = run(["sources", "add", "share", "--folder", str(folder), "--tag", "runbooks/**=sre",
                          "--tag", "**/*.md=handbook", *ix], capsys, monkeypatch)
    assert code == 0, err
    assert run(["sources", "sync", "share", *ix], capsys, monkeypatch)[0] == 0
    _, out, _ = run(["status", "--json", *ix], capsys, monkeypatch)
    tags = {d["name"]: d["tags"] for d in json.loads(out)["documents"]}
    assert tags == {"packets.md": ["sre", "handbook"], "apollo.md": ["handbook"]}
    search = ["search", "Who developed the packet switching concept?", "--json", "--filter", "tags=sre", *ix]
    assert {r["document_name"] for r in json.loads(run(search, capsys, monkeypatch)[1])} == {"packets.md"}
    (folder / "runbooks" / "packets.md").rename(folder / "packets.md")  # out of runbooks/: a new key, no sre
    assert run(["sources", "sync", "share", *ix], capsys, monkeypatch)[0] == 0
    _, out, _ = run(["status", "--json", *ix], capsys, monkeypatch)
    assert {d["name"]: d["tags"] for d in json.loads(out)["documents"]} == \
        {"packets.md": ["handbook"], "apollo.md": ["handbook"]}
    assert json.loads(run(search, capsys, monkeypatch)[1]) == []
    assert_one_line_error(run(["sources", "add", "bad", "--folder", str(folder), "--tag", "runbooks/**", *ix],
                              capsys, monkeypatch), "tags rule ['runbooks/**', '']")


def test_a_folders_group_rules_decide_who_reads_its_documents(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rules GLOB=GROUP give each synced document the groups that may read it (before its text is searchable); a
    reader outside them does not find it, one inside does; a document moved out of the rule's glob is open again."""
    folder = tmp_path / "share"
    (folder / "hr").mkdir(parents=True)
    shutil.copy(XQUAD / "Packet_switching.txt", folder / "hr" / "packets.md")
    shutil.copy(XQUAD / "Apollo_program.txt", folder / "apollo.md")
    ix = ["--index", str(tmp_path / "ix")]
    assert run(["sources", "add", "share", "--folder", str(folder), "--group", "hr/**=hr", *ix], capsys,
               monkeypatch)[0] == 0
    assert run(["sources", "sync", "share", *ix], capsys, monkeypatch)[0] == 0

    def groups() -> dict[str, list[str]]:
        return {d["name"]: d["groups"] for d in json.loads(run(["status", "--json", *ix], capsys,
                                                               monkeypatch)[1])["documents"]}

    def found(audience: frozenset[str]) -> set[str]:
        with Citerag.open(Settings(index_dir=tmp_path / "ix")) as app:
            result = app.search("Who developed the packet switching concept?",
                                SearchOptions(k=5, filters=Filters().seen_by(audience)))
        return {h.document.name for h in result.hits}

    assert groups() == {"packets.md": ["hr"], "apollo.md": []}
    assert found(frozenset()) == {"apollo.md"} and "packets.md" in found(frozenset({"hr"}))
    (folder / "hr" / "packets.md").rename(folder / "packets.md")  # out of hr/: open to everyone
    assert run(["sources", "sync", "share", *ix], capsys, monkeypatch)[0] == 0
    assert groups() == {"packets.md": [], "apollo.md": []} and "packets.md" in found(frozenset())
    assert_one_line_error(run(["sources", "add", "bad", "--folder", str(folder), "--group", "hr/**", *ix],
                              capsys, monkeypatch), "groups rule ['hr/**', '']")
