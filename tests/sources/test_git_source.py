"""citerag.sources.git against real repositories: served by a real `git daemon` on a loopback port, and over file://.
The documents are real text (a few XQuAD articles, CC-BY-SA 4.0, see eval/xquad-en/LICENSE-CC-BY-SA-4.0.txt)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.globs import glob_regex
from citerag.sources.base import Change, Failed, Fetched, Known, Unchanged, Unreachable
from citerag.sources.git import GitSource
from corpus_paths import ROOT
from http_servers import free_port
from system_tools import require_git
from upstreams import Served, commit_all, git, start_daemon


@pytest.fixture(autouse=True)
def _git() -> None:
    require_git()

CORPUS = ROOT / "eval" / "xquad-en" / "corpus"
TEMPLATE = "https://forge.example/docs/blob/{commit}/{path}"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    base = tmp_path / "served"
    repo = base / "docs"
    (repo / "docs" / "guide").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    shutil.copy(CORPUS / "Nikola_Tesla.txt", repo / "docs" / "Nikola_Tesla.txt")
    shutil.copy(CORPUS / "Kenya.txt", repo / "docs" / "Kenya.txt")
    shutil.copy(CORPUS / "Chloroplast.txt", repo / "docs" / "guide" / "chloro plast.txt")  # a space, for the link
    (repo / "README.md").write_text("# Docs\n\nA few articles about Tesla, Kenya and chloroplasts.\n")
    (repo / "build.py").write_text("print('not a document')\n")
    (repo / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    (repo / "LINK.md").symlink_to("README.md")  # a symlink: no bytes of its own, never indexed
    commit_all(repo, "first")
    served = start_daemon(base, repo, tmp_path / "daemon.log")
    try:
        yield served
    finally:
        served.stop()


EXPECTED = {"README.md", "docs/Nikola_Tesla.txt", "docs/Kenya.txt", "docs/guide/chloro plast.txt"}


def blob(repo: Path, path: str, rev: str = "HEAD") -> str:
    return git(repo, "rev-parse", f"{rev}:{path}")


def recorded(changes: list[Change], before: dict[str, Known] | None = None) -> dict[str, Known]:
    """What the sync records after a pass: each document's latest token."""
    known = dict(before or {})
    known.update({c.key: Known(c.token, lambda: None) for c in changes if isinstance(c, Fetched | Unchanged)})
    return known


def test_first_scan_fetches_every_matching_file(served: Served, tmp_path: Path) -> None:
    source = GitSource(served.url, tmp_path / "cache", link_template=TEMPLATE)
    changes = list(source.scan({}))
    head = git(served.repo, "rev-parse", "HEAD")
    assert source.complete and source.commit == head
    assert all(isinstance(c, Fetched) for c in changes)
    fetched = {c.key: c for c in changes if isinstance(c, Fetched)}
    assert set(fetched) == EXPECTED == set(source.fetched_paths)  # no build.py, logo.png, nor the LINK.md symlink
    for path, doc in fetched.items():
        assert doc.data == (served.repo / path).read_bytes()
        assert doc.token == blob(served.repo, path)
        assert doc.name == Path(path).name
        assert doc.origin == f"{path} at {head[:12]}"
    assert fetched["docs/guide/chloro plast.txt"].link == \
        f"https://forge.example/docs/blob/{head}/docs/guide/chloro%20plast.txt"
    assert fetched["README.md"].link == f"https://forge.example/docs/blob/{head}/README.md"
    # Without a template no link; a size limit leaves the big files out; the globs pick what is read.
    small = GitSource(served.url, tmp_path / "cache2", max_bytes=3000, globs=["docs/*.txt", "*.png"])
    assert {c.key: c.name for c in small.scan({})} == {"docs/Nikola_Tesla.txt": "Nikola_Tesla.txt",
                                                        "docs/Kenya.txt": "Kenya.txt", "logo.png": "logo.png"}
    assert all(isinstance(c, Fetched) and c.link == "" for c in small.scan({}))


def test_resync_reads_only_what_changed(served: Served, tmp_path: Path) -> None:
    source = GitSource(served.url, tmp_path / "cache")
    known = recorded(list(source.scan({})))
    again = list(source.scan(known))
    assert all(isinstance(c, Unchanged) for c in again) and {c.key for c in again} == EXPECTED
    assert source.fetched_paths == [] and source.complete

    (served.repo / "docs" / "Kenya.txt").write_text("Kenya, revised.\n")
    shutil.copy(CORPUS / "Southern_California.txt", served.repo / "docs" / "Southern_California.txt")
    (served.repo / "docs" / "Nikola_Tesla.txt").unlink()
    head = commit_all(served.repo, "change one, add one, delete one")
    changes = list(source.scan(known))
    assert source.complete and source.commit == head
    assert sorted(source.fetched_paths) == ["docs/Kenya.txt", "docs/Southern_California.txt"]
    assert {c.key for c in changes} == EXPECTED - {"docs/Nikola_Tesla.txt"} | {"docs/Southern_California.txt"}
    kenya = next(c for c in changes if c.key == "docs/Kenya.txt")
    assert isinstance(kenya, Fetched) and kenya.data == b"Kenya, revised.\n"
    assert kenya.token == blob(served.repo, "docs/Kenya.txt") != known["docs/Kenya.txt"].token
    assert isinstance(next(c for c in changes if c.key == "README.md"), Unchanged)
    # A second source instance on the same cache (a restarted service) reuses the clone and reads nothing new.
    assert all(isinstance(c, Unchanged) for c in GitSource(served.url, tmp_path / "cache").scan(recorded(changes)))


def test_branch_option_and_remote_head(served: Served, tmp_path: Path) -> None:
    git(served.repo, "checkout", "-q", "-b", "v2")
    (served.repo / "README.md").write_text("# Docs, version 2\n")
    (served.repo / "docs" / "Kenya.txt").unlink()
    v2 = commit_all(served.repo, "v2")
    git(served.repo, "checkout", "-q", "main")

    main_docs = {c.key: c for c in GitSource(served.url, tmp_path / "main").scan({})}
    assert set(main_docs) == EXPECTED
    source = GitSource(served.url, tmp_path / "v2", branch="v2")
    v2_docs = {c.key: c for c in source.scan({})}
    assert set(v2_docs) == EXPECTED - {"docs/Kenya.txt"} and source.commit == v2
    readme = v2_docs["README.md"]
    assert isinstance(readme, Fetched) and readme.data == b"# Docs, version 2\n"

    # With no branch configured, the source follows the remote's HEAD branch.
    git(served.repo, "checkout", "-q", "v2")
    follow = GitSource(served.url, tmp_path / "main")
    assert {c.key for c in follow.scan({})} == EXPECTED - {"docs/Kenya.txt"} and follow.commit == v2

    with pytest.raises(Unreachable, match="no branch 'nope'"):
        list(GitSource(served.url, tmp_path / "nope", branch="nope").scan({}))


def test_unreachable_and_a_broken_cache(served: Served, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    source = GitSource(served.url, cache, timeout=20)
    assert {c.key for c in source.scan({})} == EXPECTED

    # A half-made cache: the objects gone (a killed clone, a disk error), then only the packs, then garbage and a
    # leftover temporary clone. Each time the next scan clones afresh and reads everything.
    shutil.rmtree(cache / "repo.git" / "objects")
    assert {c.key for c in source.scan({}) if isinstance(c, Fetched)} == EXPECTED and source.complete
    for pack in (cache / "repo.git" / "objects" / "pack").iterdir():
        pack.unlink()
    assert {c.key for c in source.scan({}) if isinstance(c, Fetched)} == EXPECTED and source.complete
    shutil.rmtree(cache / "repo.git")
    (cache / "repo.git").mkdir()
    (cache / "repo.git" / "HEAD").write_text("garbage")
    (cache / ".tmp-killed").mkdir()
    (cache / ".tmp-killed" / "config").write_text("half")
    assert {c.key for c in source.scan({}) if isinstance(c, Fetched)} == EXPECTED and source.complete
    assert sorted(p.name for p in cache.iterdir()) == ["repo.git"]

    # One blob lost from an otherwise whole cache: that document fails this time (its recorded version stays),
    # the rest is read, and the next scan clones afresh.
    bare = cache / "repo.git"
    pack = next((bare / "objects" / "pack").glob("*.pack"))
    moved = tmp_path / "moved.pack"
    pack.rename(moved)
    for other in (bare / "objects" / "pack").iterdir():
        other.unlink()
    subprocess.run(["git", "--git-dir", str(bare), "unpack-objects", "-q"], stdin=moved.open("rb"), check=True)
    readme = blob(served.repo, "README.md")
    (bare / "objects" / readme[:2] / readme[2:]).unlink()
    changes = list(source.scan({}))
    assert [c.key for c in changes if isinstance(c, Failed)] == ["README.md"] and source.complete
    assert {c.key for c in changes if isinstance(c, Fetched)} == EXPECTED - {"README.md"}
    assert {c.key for c in source.scan({}) if isinstance(c, Fetched)} == EXPECTED

    with pytest.raises(Unreachable, match="git repository git://127.0.0.1:.*/gone"):
        list(GitSource(served.url.replace("/docs", "/gone"), tmp_path / "gone").scan({}))

    served.stop()
    source.complete = True
    with pytest.raises(Unreachable) as down:
        list(source.scan({}))
    assert served.url in str(down.value) and "\n" not in str(down.value) and not source.complete
    with pytest.raises(Unreachable):
        list(GitSource(served.url, tmp_path / "never").scan({}))

    # Credentials in the URL never reach the message (a closed loopback port: refused at once).
    secret = f"https://user:s3cret@127.0.0.1:{free_port()}/docs.git"
    with pytest.raises(Unreachable) as refused:
        list(GitSource(secret, tmp_path / "secret", timeout=20).scan({}))
    assert "s3cret" not in str(refused.value) and "***@127.0.0.1" in str(refused.value)


def test_file_url(served: Served, tmp_path: Path) -> None:
    source = GitSource(served.repo.as_uri(), tmp_path / "cache")
    docs = {c.key: c for c in source.scan({})}
    assert set(docs) == EXPECTED and source.complete
    tesla = docs["docs/Nikola_Tesla.txt"]
    assert isinstance(tesla, Fetched) and tesla.data == (CORPUS / "Nikola_Tesla.txt").read_bytes()
    assert tesla.link == ""


@pytest.mark.parametrize(("pattern", "path", "matches"), [
    ("**/*.md", "README.md", True), ("**/*.md", "a/b/c.md", True), ("**/*.md", "a/b/c.mdx", False),
    ("*.md", "a/b.md", False), ("docs/*.txt", "docs/a.txt", True), ("docs/*.txt", "docs/x/a.txt", False),
    ("docs/**/*.rst", "docs/a.rst", True), ("docs/**/*.rst", "docs/x/y/a.rst", True),
    ("docs/**", "docs/x/y", True), ("doc?/[!b]*.txt", "docs/a.txt", True), ("doc?/[!b]*.txt", "docs/b.txt", False),
    ("a+b/(x).md", "a+b/(x).md", True),
])
def test_glob_semantics(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_regex(pattern).match(path)) is matches
