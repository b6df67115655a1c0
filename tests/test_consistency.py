"""Readers always see one whole version of the index: re-indexing killed at every step, queries running while
documents are replaced, a full disk that stops the run instead of failing documents, and pending documents.

The deterministic HashEncoder (tests/fakes.py) keeps these fast and exact; the CLI reproduction at the end
runs the real encoder in real processes, as the defect was found.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from citerag.app.home import Citerag
from citerag.app.models import AskOptions, SearchOptions
from citerag.errors import StoreUnavailable
from citerag.settings import Settings
from corpus_paths import DATA, DEV_CORPUS
from fakes import HashEncoder

TESTS = Path(__file__).resolve().parent
CHAPTERS = ["ch04.md", "ch05.md", "ch07.md", "ch08.md", "ch10.md"]
ADDED = "\n\nA paragraph added later says that the locale must be regenerated after every upgrade.\n"


def fake_app(index: Path, create: bool = True) -> Citerag:
    app = Citerag()
    app.register_encoder(HashEncoder())
    app.open_collection(Settings(index_dir=index, embedding_model="hash-64"), create=create)
    return app


def corpus(folder: Path, names: list[str] = CHAPTERS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copy(DATA / "markdown" / "debian-reference" / name, folder / name)
    return folder


def assert_whole(index: Path, versions: dict[str, set[str]]) -> None:
    """A fresh reader's snapshot: every chunk matches its document's text, and every document's text is one of
    the versions it may have (never a mix, never missing)."""
    with fake_app(index, create=False) as reader:
        store = reader.collection().store
        snap = store.snapshot("hash-64")
        for c in snap.chunks:
            assert snap.texts[c.document_id][c.start:c.end] == c.content
        names = {d.name: d for d in snap.documents.values()}
        assert set(names) == set(versions), "a document disappeared from search"
        for name, doc in names.items():
            assert snap.texts[doc.id] in versions[name]
            assert doc.chunk_count == sum(c.document_id == doc.id for c in snap.chunks) > 0
        # Answers cite from the same snapshot.
        answer = reader.ask("How do I regenerate the locale?", AskOptions(threshold=1.5))
        for c in answer.citations:
            assert snap.texts[c.document_id][c.start:c.end] == c.quote


# The child re-indexes one changed document and stops (SIGSTOP-like: it waits to be killed) at one step.
CHILD = r"""
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from fakes import HashEncoder
import citerag.ingest.indexer as ingest
from citerag.app.home import Citerag
from citerag.settings import Settings

index, folder, step = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]

def stop(name):
    if name == step:
        print("at " + name, flush=True)
        time.sleep(600)

def wrap(fn, name):
    def inner(*a, **kw):
        stop("before " + name)
        out = fn(*a, **kw)
        stop("after " + name)
        return out
    return inner

ingest.chunk_extracted = wrap(ingest.chunk_extracted, "chunk")
enc = HashEncoder()
enc.encode = wrap(enc.encode, "encode")
app = Citerag()
app.register_encoder(enc)
collection = app.open_collection(Settings(index_dir=index, embedding_model="hash-64"))
# Inside the store's write transaction: statement by statement, as SQLite runs them.
collection.store._db.set_trace_callback(lambda sql: stop("sql " + " ".join(sql.split()[:2])))
collection.ingest([folder])
stop("done")
print("finished", flush=True)
"""

STEPS = ["before chunk", "after chunk", "before encode", "after encode", "sql BEGIN IMMEDIATE",
         "sql DELETE FROM", "sql INSERT INTO", "sql UPDATE documents", "sql COMMIT", "done"]


def test_a_reindex_killed_at_every_step_leaves_one_whole_version(tmp_path: Path) -> None:
    folder = corpus(tmp_path / "docs", CHAPTERS[:2])
    index = tmp_path / "ix"
    with fake_app(index) as app:
        app.ingest([folder])
    changed = folder / "ch04.md"
    old_text = changed.read_text()
    new_text = old_text + ADDED
    changed.write_text(new_text)
    from citerag.app.files import extract_file

    versions = {"ch04.md": {extract_file(DATA / "markdown" / "debian-reference" / "ch04.md").text,
                            extract_file(changed).text},
                "ch05.md": {extract_file(folder / "ch05.md").text}}
    seen_new = []
    for step in STEPS:
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(TESTS), str(index), str(folder), step],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = child.stdout.readline().strip()  # type: ignore[union-attr]
            assert line == f"at {step}", (step, line, child.stderr.read() if child.poll() is not None else "")  # type: ignore[union-attr]
            assert_whole(index, versions)  # while the writer is stopped mid-step
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        assert_whole(index, versions)  # after it was killed there
        with fake_app(index, create=False) as reader:
            doc = reader.collection().store.document_by_path(str(changed.resolve()))
            assert doc is not None and doc.status == "indexed"
            seen_new.append("regenerated after every upgrade" in reader.collection().store.canonical_text(doc.id))
    # Killed before the commit the old version is served; from the commit on, the new one.
    assert seen_new == [False] * 9 + [True]
    with fake_app(index, create=False) as app:  # a later ingest has nothing left to do
        report = app.ingest([folder])
        assert report.indexed == [] and report.unchanged == 2


def _query(app: Citerag, stop: threading.Event, errors: list[BaseException], counts: list[int]) -> None:
    try:
        while not stop.is_set():
            for c in app.search("locale regenerated upgrade", SearchOptions(mode="hybrid", k=10)).citations:
                assert c.quote
            app.ask("How do I regenerate the locale?", AskOptions(threshold=1.5))
            counts.append(1)
    except BaseException as exc:  # noqa: BLE001 - every failure is what this test counts
        errors.append(exc)


def _reader(index: Path, stop: threading.Event, errors: list[BaseException], counts: list[int]) -> None:
    """A reader with a collection of its own, as another process has."""
    with fake_app(index, create=False) as app:
        _query(app, stop, errors, counts)


def _indexed(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """The chapters indexed: their folder, the index, and their original texts."""
    folder = corpus(tmp_path / "docs")
    index = tmp_path / "ix"
    with fake_app(index) as writer:
        writer.ingest([folder])
    return folder, index, {p.name: p.read_text() for p in folder.iterdir()}


def test_queries_in_parallel_with_a_reindex_see_no_errors(tmp_path: Path) -> None:
    folder, index, originals = _indexed(tmp_path)
    with fake_app(index, create=False) as writer:
        stop, errors, counts = threading.Event(), [], []  # type: ignore[var-annotated]
        readers = [threading.Thread(target=_reader, args=(index, stop, errors, counts)) for _ in range(3)]
        for t in readers:
            t.start()
        try:
            for round_ in range(6):  # every document replaced six times while the readers query
                for path in folder.iterdir():
                    path.write_text(originals[path.name] + (ADDED * (round_ + 1)))
                report = writer.ingest([folder])
                assert len(report.indexed) == len(CHAPTERS) and not report.failed
        finally:
            stop.set()
            for t in readers:
                t.join(timeout=120)
    assert errors == [] and len(counts) >= 3


def test_a_full_disk_stops_the_run_and_retry_recovers(tmp_path: Path) -> None:
    folder = corpus(tmp_path / "docs")
    index = tmp_path / "ix"
    with fake_app(index) as app:
        app.ingest([folder / "ch04.md"])
        db = app.collection().store._db
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages + 2}")  # the disk is full a few pages on
        with pytest.raises(StoreUnavailable, match="full"):
            app.ingest([folder])
        status = {r.document.name: r.document.status for r in app.status().documents}
        assert status["ch04.md"] == "indexed"
        assert "failed" not in status.values()  # nothing was blamed on a document
        assert any(s == "pending" for s in status.values())
        assert app.status().counts["stale"] == 0  # pending documents are not stale
        db.execute("PRAGMA max_page_count = 1073741823")
        retried = app.retry_failed()
        assert not retried.failed
        assert {r.document.status for r in app.status().documents} == {"indexed"}
        # The files the stopped run never reached are indexed by running it again; then nothing is left.
        rest = app.ingest([folder])
        assert not rest.failed and rest.unchanged + len(rest.indexed) == len(CHAPTERS)
        assert app.ingest([folder]).unchanged == len(CHAPTERS)


def test_cli_searches_while_ingest_replaces_documents(tmp_path: Path) -> None:
    """The defect as found: ingest changed chapters while `citerag search` runs in parallel processes."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("ch08.en.html", "apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    index = tmp_path / "ix"
    exe = shutil.which("citerag") or str(Path(sys.executable).parent / "citerag")
    subprocess.run([exe, "ingest", str(folder), "--index", str(index)], check=True, capture_output=True, timeout=600)
    for path in folder.iterdir():
        text = path.read_text()
        path.write_text(text.replace("</body>", "<p>A paragraph added later about locales and upgrades.</p></body>"))
    ingest = subprocess.Popen([exe, "ingest", str(folder), "--index", str(index), "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    searches = [subprocess.Popen([exe, "search", q, "--index", str(index), "--mode", "hybrid", "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for q in ("locale generation", "popcon votes", "document revision history")]
    outs = [p.communicate(timeout=600) for p in searches]
    out, err = ingest.communicate(timeout=600)
    assert ingest.returncode == 0, err
    assert len(json.loads(out)["indexed"]) == 3
    for p, (sout, serr) in zip(searches, outs, strict=True):
        assert p.returncode == 0 and "error" not in serr, serr
        assert json.loads(sout)


@pytest.mark.parametrize("vector_index", ["exact", "hnsw"])
def test_a_long_lived_process_sees_documents_another_process_adds(tmp_path: Path, vector_index: str) -> None:
    """No restart: the collection notices the store's new generation and searches the new document."""
    index = tmp_path / "ix"
    reader = Citerag.open(Settings(index_dir=index, vector_index=vector_index), create=True)
    reader.ingest([DATA / "markdown" / "debian-reference" / "ch04.md"])
    before = reader.search("popcon votes package popularity", SearchOptions(mode="bm25", k=5)).citations
    assert all(Path(c.source_path).name == "ch04.md" for c in before)
    dense = reader.search("How do I see how popular a package is?", SearchOptions(mode="dense", k=3)).citations
    exe = shutil.which("citerag") or str(Path(sys.executable).parent / "citerag")
    subprocess.run([exe, "ingest", str(DEV_CORPUS / "pr01.en.html"), "--index", str(index)], check=True,
                   capture_output=True, timeout=600)
    after = reader.search("popcon votes package popularity", SearchOptions(mode="bm25", k=5)).citations
    assert Path(after[0].source_path).name == "pr01.en.html"
    # The new document's vectors were added too, read from the change log: dense hits now include it.
    dense_after = reader.search("popcon votes package popularity", SearchOptions(mode="hybrid", k=3)).citations
    assert Path(dense_after[0].source_path).name == "pr01.en.html" and dense
    reader.close()


def test_threads_sharing_one_collection_search_while_another_process_replaces_documents(tmp_path: Path) -> None:
    """The service's case: one open collection, its in-memory indexes shared by many threads, a writer elsewhere.
    A thread whose store view is older than what another thread has caught the indexes up to must never be handed
    chunks its view does not have (found under load as a KeyError and a 500)."""
    folder, index, originals = _indexed(tmp_path)
    stop, errors, counts = threading.Event(), [], []  # type: ignore[var-annotated]
    with fake_app(index, create=False) as shared:
        # 4 readers, 6 rounds (21 s alone): with LocalSearch.reading() made a no-op it failed 3 runs of 3.
        readers = [threading.Thread(target=_query, args=(shared, stop, errors, counts)) for _ in range(4)]
        for t in readers:
            t.start()
        try:
            with fake_app(index, create=False) as other:  # another process's collection: its own indexes
                for round_ in range(6):
                    for path in folder.iterdir():
                        path.write_text(originals[path.name] + (ADDED * (round_ + 1)))
                        other.ingest([path])
        finally:
            stop.set()
            for t in readers:
                t.join(timeout=120)
    assert errors == [] and len(counts) >= 6
