"""A source's sync SIGKILLed at random moments (issue 29): 10 trials per kind of source (a folder, a Git repository
behind a real `git daemon`, a website on a real HTTP server, all on loopback). Before each trial the origin
changes (a document changed, one added, one deleted); `citerag sources sync` runs as its own process and is killed
at a random moment between taking the source's lease and its end (the window measured first). After every kill
a reader proves that no document was lost (each one the origin still holds is indexed at its old or its new
version) and none is half visible (an indexed document's chunks are its canonical text, its stored original has
the bytes its row names); then the next sync takes the dead process's lease over at once and completes, leaving
exactly the origin's documents at their newest bytes. The text is XQuAD's (CC-BY-SA 4.0, eval/xquad-en)."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from citerag.app import sources
from citerag.app.home import Citerag
from citerag.settings import Settings
from citerag.types import SourceInfo
from corpus_paths import ROOT
from system_tools import require_git
from upstreams import Site, commit_all, git, page, start_daemon

TRIALS = 10
PARAGRAPHS = [p for f in sorted((ROOT / "eval" / "xquad-en" / "corpus").glob("*.txt"))
              for p in f.read_text(encoding="utf-8").split("\n\n") if len(p) > 300][:80]


class Origin:
    """One origin's documents as the test writes them (name -> text), materialised as the kind's own."""

    def __init__(self, kind: str, base: Path) -> None:
        self.kind = kind
        self.base = base
        self.files: dict[str, str] = {f"doc{i}": PARAGRAPHS[i] for i in range(4)}
        self.site: Site | None = None
        self.daemon = None
        if kind == "git":
            self.repo = base / "served" / "docs"
            self.repo.mkdir(parents=True)
            git(self.repo, "init", "-q", "-b", "main")
        self.write()
        if kind == "git":
            self.daemon = start_daemon(base / "served", self.repo, base / "daemon.log")
        if kind == "web":
            self.site = Site(base / "site")

    @property
    def location(self) -> str:
        if self.kind == "folder":
            return str(self.base / "share")
        if self.kind == "git":
            assert self.daemon is not None
            return self.daemon.url
        assert self.site is not None
        return self.site.url("/docs/index.html")

    def write(self) -> None:
        if self.kind == "web":
            root = self.base / "site" / "docs"
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            for name, text in self.files.items():
                (root / f"{name}.html").write_text(page(name, []).replace("</ul>", f"</ul><p>{text}</p>"))
            (root / "index.html").write_text(page("Index", [f"{n}.html" for n in self.files]))
            return
        root = self.base / "share" if self.kind == "folder" else self.repo
        for old in root.glob("*.txt"):
            if old.stem not in self.files:
                old.unlink()
        for name, text in self.files.items():
            path = root / f"{name}.txt"
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
        if self.kind == "git":
            commit_all(self.repo, f"{len(self.files)} documents")

    def change(self, trial: int) -> None:
        """One document changed, one added, one deleted."""
        names = sorted(self.files)
        self.files[names[trial % len(names)]] += f" Trial {trial} added this sentence."
        del self.files[names[(trial + 1) % len(names)]]
        self.files[f"new{trial}"] = PARAGRAPHS[(10 + trial) % len(PARAGRAPHS)]
        self.write()

    def truth(self) -> dict[str, str]:
        """The source's keys and the SHA-256 of the bytes each holds now."""
        if self.kind == "web":
            assert self.site is not None
            root = self.base / "site" / "docs"
            return {self.site.url(f"/docs/{p.name}"): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in root.glob("*.html")}
        root = self.base / "share" if self.kind == "folder" else self.repo
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.glob("*.txt")}

    def close(self) -> None:
        if self.daemon is not None:
            self.daemon.stop()
        if self.site is not None:
            self.site.server.shutdown()
            self.site.server.server_close()


@pytest.fixture(params=["folder", "git", "web"])
def origin(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Origin]:
    if request.param == "git":
        require_git()
    made = Origin(request.param, tmp_path / "origin")
    try:
        yield made
    finally:
        made.close()


def _held_by(ix: Path, pid: int) -> bool:
    with sqlite3.connect(f"file:{ix / 'index.sqlite3'}?mode=ro", uri=True, timeout=5) as db:
        row = db.execute("SELECT lease_holder, lease_until FROM sources WHERE name = 'src'").fetchone()
    return bool(row and row[0] and row[0].split(":")[1] == str(pid) and row[1] > time.time())


def _generation(ix: Path) -> int:
    with sqlite3.connect(f"file:{ix / 'index.sqlite3'}?mode=ro", uri=True, timeout=5) as db:
        return int(db.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])


def _first_write(ix: Path, process: subprocess.Popen[bytes], since: int) -> float:
    """Wait until the process committed its first change to the documents (or ended); when."""
    while _generation(ix) == since and process.poll() is None:
        time.sleep(0.002)
    return time.monotonic()


def _spawn(ix: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "citerag.cli", "sources", "sync", "src", "--index", str(ix)],
                                stdout=out, stderr=out, start_new_session=True)


def _held_then(ix: Path, process: subprocess.Popen[bytes], log: Path) -> float:
    """Wait until the process holds the lease (its sync began); when it did."""
    deadline = time.monotonic() + 120
    while not _held_by(ix, process.pid):
        if process.poll() is not None:
            raise AssertionError(f"the sync ended before it was seen holding the lease:\n{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError("the sync never took the lease")
        time.sleep(0.005)
    return time.monotonic()


def _documents(app: Citerag) -> dict[str, tuple[str, str]]:
    """The source's documents by key: (status, sha256), each checked whole where it is indexed."""
    collection = app.collection()
    snap = collection.store.snapshot(collection.settings.embedding_model)
    found: dict[str, tuple[str, str]] = {}
    for doc in collection.documents():
        if not doc.source_path.startswith("source:src:"):
            continue
        key = doc.source_path.removeprefix("source:src:")
        found[key] = (doc.status, doc.sha256)
        if doc.status != "indexed":
            assert doc.id not in snap.documents, f"{key} is {doc.status} but searchable"
            continue
        text = snap.texts[doc.id]
        chunks = [c for c in snap.chunks if c.document_id == doc.id]
        assert chunks and len(chunks) == doc.chunk_count, f"{key}: {len(chunks)} chunks, its row says {doc.chunk_count}"
        assert all(text[c.start:c.end] == c.content for c in chunks), f"{key}: a chunk is not its text"
        data = collection.read_original(doc)
        assert data is not None and hashlib.sha256(data).hexdigest() == doc.sha256, f"{key}: its original is gone"
    return found


def test_a_sync_killed_at_random_moments_loses_nothing_and_the_next_completes(origin: Origin, tmp_path: Path) -> None:
    ix = tmp_path / "ix"
    log = tmp_path / "sync.log"
    rng = random.Random(f"sync-kill-{origin.kind}")
    with Citerag.open(Settings(index_dir=ix), create=True) as app:
        sources.add(app.collection(), SourceInfo("src", origin.kind, origin.location,
                                                 {"rate": 200.0} if origin.kind == "web" else {}))
        assert sources.sync(app.collection(), "src").complete
        assert {k: s for k, (_, s) in _documents(app).items()} == origin.truth()
        # Where kills land: from the lease taken (fetching, cloning, crawling, loading the model) to the process's
        # end in odd trials, from its first commit (indexing, deleting, recording) to its end in even ones; both
        # windows measured on a sync with work to do.
        origin.change(100)
        generation = _generation(ix)
        process = _spawn(ix, log)
        began = _held_then(ix, process, log)
        wrote = _first_write(ix, process, generation)
        assert process.wait(120) == 0, log.read_text()[-2000:]
        windows = (time.monotonic() - wrote, time.monotonic() - began)
        landed = {"before the end": 0, "after the end": 0}
        for trial in range(TRIALS):
            before = origin.truth()
            held = _documents(app)
            origin.change(trial)
            after = origin.truth()
            generation = _generation(ix)
            process = _spawn(ix, log)
            _held_then(ix, process, log)
            if trial % 2 == 0:
                _first_write(ix, process, generation)
            time.sleep(rng.uniform(0, windows[trial % 2]))
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(30)
                landed["before the end"] += 1
            else:
                assert process.returncode == 0, log.read_text()[-2000:]
                landed["after the end"] += 1
            seen = _documents(app)
            for key, (status, sha) in seen.items():  # whole, and at a version the origin gave
                if status == "indexed":
                    assert sha in {before.get(key), after.get(key)}, (trial, key)
            for key in set(held) & set(after):  # nothing the origin still holds was lost
                assert key in seen and seen[key][0] == "indexed", (trial, key, seen.get(key))
            # The next sync takes the dead process's lease at once and completes.
            report = sources.sync(app.collection(), "src")
            assert report.error is None and report.complete, (trial, report)
            assert {k: s for k, (st, s) in _documents(app).items() if st == "indexed"} == after, trial
            assert all(st == "indexed" for st, _ in _documents(app).values()), trial
        assert landed["before the end"] >= TRIALS // 2, landed  # most kills landed inside a sync
