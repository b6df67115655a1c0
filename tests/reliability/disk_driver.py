"""The driver of tests/reliability/test_disk.py: runs inside a private user and mount namespace (`unshare -rm`),
where it may mount a size-limited tmpfs, fill it, give it more space and make it read-only, runs the real CLI and a
real `citerag serve` on it, checks what is left on disk, and prints what it saw as one JSON object on stdout for
the test to assert. It asserts nothing itself: a scenario that goes wrong is a finding in its output.

    unshare -rm python disk_driver.py SCENARIO WORKDIR

Scenarios: `cli` (full disk, recovery, read-only index, with the real encoder), `sync` (a folder source's sync
onto a full disk, then with room), `sweep` (the disk full at many
moments of an ingest, in process with the hash encoder), `index_files` (the search index files failing to save at
every step of a save), `service` (uploads on a full disk and a read-only home).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
sys.path[:0] = [str(HERE), str(TESTS)]

from corpus100 import make_corpus  # noqa: E402

# The command installed beside this Python (the one under test), else the first on PATH.
EXE = str(Path(sys.executable).parent / "citerag") if (Path(sys.executable).parent / "citerag").exists() \
    else shutil.which("citerag") or "citerag"
# Answered by ch01-038 ("Setting a default text editor"), among the documents indexed before the 2 MB disk fills.
QUESTION = "How do I set a default text editor?"
FIRST = "ch01-038.md"  # the service's first upload: the document that answers QUESTION
LATE = """# A late arrival

## Locales

A paragraph added to the folder while its index was read-only: the locale is regenerated with dpkg-reconfigure
locales after every upgrade, and the default editor is chosen with update-alternatives.
"""
MODEL = "minilm+use"  # the default encoder (citerag.settings.DEFAULT_ENCODER)


# The file system under test.

def mount(folder: Path, size: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "none", str(folder)], check=True)


def remount(folder: Path, options: str) -> None:
    # The source named ("none"): with the mount point alone, mount(8) repeats the options it reads back (uid=...),
    # which a user namespace of a non-root user refuses ("mount point not mounted or bad option").
    subprocess.run(["mount", "-o", f"remount,{options}", "none", str(folder)], check=True)


def free_bytes(folder: Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def fill(folder: Path, leave: int = 0) -> Path:
    """A new file that fills the file system up to `leave` free bytes (tmpfs counts whole pages); delete it and
    the room is back."""
    filler = folder / f"filler-{time.monotonic_ns()}"
    with open(filler, "wb") as f:
        block = b"\0" * 65536
        while (room := free_bytes(folder) - leave) > 0:
            try:
                f.write(block[:min(room, len(block))])
                f.flush()
            except OSError:  # full: as full as it gets
                break
    return filler


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder`: its SHA-256, to show that nothing changed."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# Commands and what a user sees.

def run(*args: str, timeout: float = 600) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITERAG_")}
    started = time.monotonic()
    done = subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout, env=env)
    out: dict[str, Any] = {"rc": done.returncode, "stderr": done.stderr.splitlines(), "stdout": done.stdout,
                           "seconds": round(time.monotonic() - started, 1)}  # for the report, never asserted
    with contextlib.suppress(ValueError):
        out["json"] = json.loads(done.stdout)
    return out


# What is on disk: the checks every scenario runs after each step.

class Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def captured_warnings() -> Iterator[list[str]]:
    handler = Captured()
    logger = logging.getLogger("citerag")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


def read_only_uri(path: Path) -> str:
    """A connection that cannot write (not even a checkpoint on close): immutable on a read-only mount with no
    -wal to apply (SQLite cannot open it otherwise there), read-only elsewhere."""
    wal = path.with_name(path.name + "-wal")
    on_ro_mount = bool(os.statvfs(path.parent).f_flag & os.ST_RDONLY)
    if on_ro_mount and (not wal.exists() or wal.stat().st_size == 0):
        return f"file:{path}?immutable=1"
    return f"file:{path}?mode=ro"


def integrity(path: Path) -> str:
    import sqlite3

    if not path.exists():
        return "absent"
    try:
        return _integrity_check(sqlite3.connect(read_only_uri(path), uri=True))
    except sqlite3.OperationalError:
        # A file in WAL mode (the traces) cannot be read in place on a full disk: its reader must create the -shm.
        # The same bytes, the -wal with them, are checked in a copy off that disk.
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            for suffix in ("", "-wal"):
                if Path(f"{path}{suffix}").exists():
                    shutil.copyfile(f"{path}{suffix}", Path(tmp) / f"{path.name}{suffix}")
            return _integrity_check(sqlite3.connect(Path(tmp) / path.name))


def _integrity_check(db: Any) -> str:
    try:
        return "; ".join(r[0] for r in db.execute("PRAGMA integrity_check"))
    finally:
        db.close()


def live_ids(index: Any) -> set[int]:
    if index is None:
        return set()
    rows = getattr(index, "exact", index).rows  # an HNSW index keeps its rows in its exact part
    return {int(i) for i in rows.ids[rows.live]}


def examine(ix: Path, model: str = MODEL, kind: str = "exact") -> dict[str, Any]:
    """The index as a fresh reader finds it: integrity, statuses, every indexed document whole against a fresh
    extraction and chunking of its file, and the saved search indexes loaded and caught up with the store."""
    from citerag.chunk import chunk_extracted
    from citerag.extract import extractor_for
    from citerag.index.analyzer import Analyzer
    from citerag.index.sync import MANIFEST, _files, index_dir, load
    from citerag.lang import detect
    from citerag.settings import Settings
    from citerag.store.sqlite import SqliteStore

    out: dict[str, Any] = {"integrity": {name: integrity(ix / name) for name in ("index.sqlite3", "traces.sqlite3")}}
    defaults = Settings(index_dir=ix)
    store = SqliteStore(ix)
    try:
        docs = store.documents()
        out["counts"] = {s: sum(d.status == s for d in docs) for s in ("indexed", "pending", "failed")}
        out["failed"] = [[d.name, d.error] for d in docs if d.status == "failed"]
        out["errors"] = [[d.name, d.error] for d in docs if d.error]
        snap = store.snapshot(model)
        broken: list[str] = []
        for doc in snap.documents.values():
            chunks = [c for c in snap.chunks if c.document_id == doc.id]
            text = snap.texts[doc.id]
            # As the indexer extracts it: the file's bytes, or a stored original (an upload's, a source's).
            data = (ix / "files" / doc.sha256).read_bytes() if doc.source_path.startswith(("upload:", "source:")) \
                else Path(doc.source_path).read_bytes()
            extractor = extractor_for(Path(doc.name))
            assert extractor is not None, doc.name
            extracted = extractor.extract(data, Path(doc.name))
            expected = chunk_extracted(extracted, defaults.strategy, defaults.target, defaults.overlap,
                                       language=detect(extracted.text))
            whole = (text == extracted.text and doc.chunk_count == len(chunks)
                     and [(c.ordinal, c.start, c.end, c.content, c.text) for c in chunks]
                     == [(i, c.start, c.end, c.content, c.text) for i, c in enumerate(expected)]
                     and all(text[c.start:c.end] == c.content for c in chunks))
            if not whole:
                broken.append(doc.name)
        out["whole"] = {"checked": len(snap.documents), "broken": broken}
        committed = {c.id for c in snap.chunks}
        folder = index_dir(ix, model, kind)
        manifest = json.loads((folder / MANIFEST).read_text()) if (folder / MANIFEST).exists() else None
        with captured_warnings() as warnings:
            saved = load(folder, model, kind, Analyzer(defaults.lexical))
            loaded = live_ids(saved.vector)
            lexical_loaded = live_ids(saved.lexical)
            with store.view() as view:
                saved.catch_up(view)
        out["search_index"] = {
            "manifest": manifest is not None,
            # Loaded from the manifest's files, not rebuilt because they were unreadable.
            "loaded_saved": manifest is not None and saved.token == manifest.get("token") and not warnings,
            "saved_generation": None if manifest is None else manifest["generation"],
            "store_generation": store.generation(),
            "saved_chunks": len(loaded),
            "saved_are_committed": loaded <= committed and lexical_loaded == loaded,
            "caught_up_equal": live_ids(saved.vector) == committed == live_ids(saved.lexical),
            "unnamed_files": sorted(p.name for p in folder.iterdir() if manifest is not None
                                    and p.name not in _files(manifest)) if folder.exists() else [],
            "warnings": warnings,
        }
    finally:
        store.close()
    return out


def quotes_match(ix: Path, rows: list[dict[str, Any]]) -> bool:
    """Every cited range is the stored canonical text's, of an indexed document."""
    from citerag.store.sqlite import SqliteStore

    store = SqliteStore(ix)
    try:
        for row in rows:
            doc = store.document(row["document_id"])
            if doc is None or doc.status != "indexed" or \
                    store.canonical_text(doc.id)[row["start"]:row["end"]] != row["quote"]:
                return False
        return True
    finally:
        store.close()


def cli_reads(ix: Path, ask: bool = True) -> dict[str, Any]:
    """search, ask and status through the CLI, and whether every quote is where its citation says."""
    out: dict[str, Any] = {}
    search = run("search", QUESTION, "--index", str(ix), "--json")
    hits = search.get("json") or []
    out["search"] = {"rc": search["rc"], "stderr": search["stderr"], "hits": len(hits),
                     "quotes_match": search["rc"] == 0 and bool(hits) and quotes_match(ix, hits)}
    if ask:
        answer = run("ask", QUESTION, "--index", str(ix), "--json")
        citations = (answer.get("json") or {}).get("citations") or []
        out["ask"] = {"rc": answer["rc"], "stderr": answer["stderr"], "citations": len(citations),
                      "quotes_match": answer["rc"] == 0 and bool(citations) and quotes_match(ix, citations)}
    status = run("status", "--index", str(ix), "--json")
    out["status"] = {"rc": status["rc"], "stderr": status["stderr"],
                     "counts": (status.get("json") or {}).get("counts")}
    return out


def brief(result: dict[str, Any]) -> dict[str, Any]:
    """A command's exit status, stderr and report (without the list of indexed paths)."""
    report = dict(result.get("json") or {})
    if "indexed" in report:
        report["indexed"] = len(report["indexed"])
    return {"rc": result["rc"], "stderr": result["stderr"], "report": report, "seconds": result["seconds"]}


# Scenarios.

def scenario_cli(work: Path) -> dict[str, Any]:
    """The CLI with the real encoder: ingest 100 documents onto a 2 MB file system until it is full (ten of them
    first, with room); search and ask on the full disk; more space, then `retry` and the same ingest finish; the same
    index read-only (reads answer, writes refuse with one line); read-write again, a new document is indexed."""
    docs, more, mnt = work / "docs", work / "more", work / "mnt"
    make_corpus(docs)
    more.mkdir()
    (more / "late-arrival.md").write_text(LATE, encoding="utf-8")
    ix = mnt / "ix"
    out: dict[str, Any] = {}
    mount(mnt, "2m")
    # Ten documents with room to spare: their search indexes are saved, the state a failed save must leave loadable.
    out["first_ingest"] = brief(run("ingest", *map(str, sorted(docs.iterdir())[:10]), "--index", str(ix), "--json"))
    out["full_ingest"] = brief(run("ingest", str(docs), "--index", str(ix), "--json"))
    out["full_examine"] = examine(ix)
    out["full_reads"] = cli_reads(ix)
    remount(mnt, "size=64m")

    # The file system goes read-only on a writer cut off by the full disk: its last commits are still only in the
    # -wal (the checkpoint had no room). Read through the -wal and -shm it left; a copy without the -shm (which
    # SQLite cannot read there) refuses in one line.
    cut = mnt / "cut"
    cut.mkdir()
    for name in ("index.sqlite3", "index.sqlite3-wal"):
        (cut / name).write_bytes((ix / name).read_bytes())
    out["cut_wal"] = {"wal_bytes": (ix / "index.sqlite3-wal").stat().st_size,
                      "shm": (ix / "index.sqlite3-shm").exists()}
    remount(mnt, "ro")
    out["cut_reads"] = cli_reads(ix, ask=False)
    out["cut_examine"] = examine(ix)
    out["cut_no_shm"] = brief(run("search", QUESTION, "--index", str(cut)))
    remount(mnt, "rw")

    out["retry"] = brief(run("retry", "--index", str(ix), "--json"))
    out["rerun"] = brief(run("ingest", str(docs), "--index", str(ix), "--json"))
    out["recovered_examine"] = examine(ix)
    out["again"] = brief(run("ingest", str(docs), "--index", str(ix), "--json"))

    remount(mnt, "ro")
    before = tree(mnt)
    out["ro_ingest_unchanged"] = brief(run("ingest", str(docs), "--index", str(ix), "--json"))
    out["ro_ingest_new"] = brief(run("ingest", str(docs), str(more), "--index", str(ix), "--json"))
    out["ro_ingest_new_index"] = brief(run("ingest", str(more), "--index", str(mnt / "other"), "--json"))
    out["ro_reads"] = cli_reads(ix)
    out["ro_unchanged"] = tree(mnt) == before
    out["ro_examine"] = examine(ix)

    remount(mnt, "rw")
    out["rw_ingest"] = brief(run("ingest", str(docs), str(more), "--index", str(ix), "--json"))
    out["final_examine"] = examine(ix)
    out["final_reads"] = cli_reads(ix)
    return out


def scenario_sync(work: Path) -> dict[str, Any]:
    """A folder source of the 100 documents synced with the real encoder onto a 2 MB file system until it is full;
    more space, then the next sync completes, and the one after fetches nothing."""
    docs, mnt = work / "docs", work / "mnt"
    make_corpus(docs)
    ix = mnt / "ix"
    mount(mnt, "2m")
    out: dict[str, Any] = {"add": brief(run("sources", "add", "docs", "--folder", str(docs), "--index", str(ix)))}
    out["full_sync"] = brief(run("sources", "sync", "docs", "--index", str(ix), "--json"))
    out["full_examine"] = examine(ix)
    remount(mnt, "size=64m")
    out["sync"] = brief(run("sources", "sync", "docs", "--index", str(ix), "--json"))
    out["examine"] = examine(ix)
    out["again"] = brief(run("sources", "sync", "docs", "--index", str(ix), "--json"))
    out["show"] = brief(run("sources", "show", "docs", "--index", str(ix), "--json"))
    return out


def hash_app(ix: Path, vector_index: str = "exact") -> Any:
    from citerag.app.home import Citerag
    from citerag.settings import Settings
    from fakes import HashEncoder

    app = Citerag()
    app.register_encoder(HashEncoder())
    app.open_collection(Settings(index_dir=ix, embedding_model="hash-64", vector_index=vector_index), create=True)
    return app


def scenario_sweep(work: Path) -> dict[str, Any]:
    """The disk full at many moments of an ingest (a document's commit, its pending row, a trace, an index
    save): in process with the hash encoder, on file systems of several sizes; each run stops with StoreUnavailable,
    leaves every document whole, and a run with more space completes the rest."""
    from citerag.errors import StoreUnavailable

    docs = work / "docs"
    make_corpus(docs)
    runs = []
    for size in ("256k", "512k", "768k", "1m", "1536k", "2m"):
        mnt = work / f"mnt-{size}"
        ix = mnt / "ix"
        mount(mnt, size)
        record: dict[str, Any] = {"size": size}
        with captured_warnings() as warnings:
            try:
                with hash_app(ix) as app:
                    report = app.ingest([docs])
                record["stopped"] = None
                record["indexed"] = len(report.indexed)
            except StoreUnavailable as exc:
                record["stopped"], record["cause"] = str(exc), exc.cause
            except Exception as exc:  # noqa: BLE001 - anything else is a finding the test reports
                record["stopped"] = f"UNEXPECTED {type(exc).__name__}: {exc}"
        record["warnings"] = sorted(set(warnings))
        if (ix / "index.sqlite3").exists():
            record["examine"] = examine(ix, "hash-64")
        remount(mnt, "size=64m")
        with hash_app(ix) as app:
            app.retry_failed()
            report = app.ingest([docs])
            record["rerun_failed"] = report.failed
        record["final"] = examine(ix, "hash-64")
        runs.append(record)
    return {"runs": runs}


def scenario_index_files(work: Path) -> dict[str, Any]:
    """The search index files (vectors, HNSW graph, BM25 segments, row tables, manifest) failing to write at every
    step of a save: the disk is filled to leave a page more room on each attempt until a save fits. After each
    failed save the previous manifest and all its files still load and search, and the failed save's files are
    gone; the save that fits is loadable and equal to the store."""
    import citerag.index.sync as sync
    from citerag.index.analyzer import Analyzer
    from citerag.ingest.files import discover
    from citerag.settings import Settings

    docs = work / "docs"
    make_corpus(docs)
    files = sorted(docs.iterdir())
    # What a failed save had written (partly) when the disk ran out, seen as its files are removed: the step it
    # failed at.
    removed: list[str] = []
    remove = sync._remove_unnamed

    def observed(directory: Path, state: dict[str, Any] | None) -> None:
        keep = sync._files(state) if state is not None else {sync.MANIFEST, "lock"}
        removed.extend(p.name for p in directory.iterdir() if p.name not in keep)
        remove(directory, state)

    sync._remove_unnamed = observed
    out: dict[str, Any] = {}
    for kind in ("hnsw", "exact"):
        mnt = work / f"mnt-{kind}"
        ix = mnt / "ix"
        mount(mnt, "8m")  # room for all of it; small, so that filling it is quick
        folder = sync.index_dir(ix, "hash-64", kind)
        attempts = []
        with hash_app(ix, kind) as app:
            collection = app.collection()
            app.ingest(files[:20])  # the previous state: saved, with a graph
            first = json.loads((folder / sync.MANIFEST).read_text())
            first_ids = live_ids(sync.load(folder, "hash-64", kind, Analyzer(Settings().lexical)).vector)
            query = collection.app.encoder("hash-64").encode(["locale settings"])[0]
            # Committed to the store without saving (a save is what fails here): 60 documents, ~400 chunks, so the
            # next save extends the vectors, writes a new graph (past 256 new rows), segments and tables.
            collection.indexer.ingest(discover(files[20:80]))
            # Their traces written now (a writer thread keeps them after the operations, citerag.trace.writer) and
            # the file closed: nothing but the saves below writes to the disk the loop fills.
            assert collection.traces is not None
            collection.traces.close()
            leave = 0
            while True:
                filler = fill(mnt, leave)
                removed.clear()
                with captured_warnings() as warnings:
                    collection.persist_indexes()
                filler.unlink()
                manifest = json.loads((folder / sync.MANIFEST).read_text())
                saved = manifest["token"] != first["token"]
                state = sync.load(folder, "hash-64", kind, Analyzer(Settings().lexical))
                ids = live_ids(state.vector)
                probe = state.vector.search(query, 5)[0] if state.vector is not None else []
                lexical = state.lexical.search("locale settings", 5)[0]
                attempts.append({
                    "leave": leave, "saved": saved, "warnings": warnings,
                    "reached": sorted({"manifest-tmp" if name.startswith(sync.MANIFEST) else
                                       "-".join(name.split("-")[:2]) for name in removed}),
                    "left_behind": sorted(p.name for p in folder.iterdir() if p.name not in sync._files(manifest)),
                    "previous_loads": not saved and state.token == first["token"] and ids == first_ids
                    and live_ids(state.lexical) == first_ids,
                    "searches": set(map(int, probe)) <= ids and set(map(int, lexical)) <= ids})
                if saved or leave > 8 << 20:
                    break
                leave += 4096  # a page at a time: every file of the save is where some attempt runs out
            out[kind] = {"attempts": attempts, "examine": examine(ix, "hash-64", kind)}
            app.ingest(files[80:])
            out[kind]["after_next_save"] = examine(ix, "hash-64", kind)
    return out


# The service.

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`citerag serve` in its own process (real uvicorn, a real socket), as a deployment runs it."""

    def __init__(self, home: Path, log: Path) -> None:
        import httpx

        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CITERAG_")}
        self.log = log
        self.process = subprocess.Popen(
            [EXE, "serve", "--index", str(home), "--no-keys", "--port", str(self.port), "--rate-limit", "none"],
            stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env)  # noqa: SIM115 - the child keeps it
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120)
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"citerag serve did not start: {log.read_text()[-2000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        self.client.close()
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(30)

    def upload(self, path: Path) -> dict[str, Any]:
        with open(path, "rb") as f:
            response = self.client.post("/v1/collections/default/documents",
                                        files=[("files", (path.name, f.read(), "text/markdown"))])
        return {"status": response.status_code, "body": response.json()}

    def settle(self, doc_id: int, timeout: float = 300) -> dict[str, Any]:
        """The document once it is no longer pending or has no job left (a store failure leaves it pending)."""
        deadline = time.monotonic() + timeout
        while True:
            doc: dict[str, Any] = self.client.get(f"/v1/collections/default/documents/{doc_id}").json()
            if (doc["status"] != "pending" or doc["job"] is None) or time.monotonic() > deadline:
                return doc
            time.sleep(0.2)

    def reads(self, doc_id: int) -> dict[str, Any]:
        """Every read route: its status code, and the error body of any that is not a 200."""
        c = self.client
        base = "/v1/collections/default"
        responses = {
            "healthz": c.get("/healthz"),
            "collections": c.get("/v1/collections"),
            "collection": c.get(base),
            "documents": c.get(f"{base}/documents"),
            "document": c.get(f"{base}/documents/{doc_id}"),
            "text": c.get(f"{base}/documents/{doc_id}/text"),
            "file": c.get(f"{base}/documents/{doc_id}/file"),
            "search": c.post(f"{base}/search", json={"query": QUESTION}),
            "ask": c.post(f"{base}/ask", json={"question": QUESTION}),
            "ask_stream": c.post(f"{base}/ask", json={"question": QUESTION, "stream": True}),
            "page": c.get("/"),
            "metrics": c.get("/metrics"),
        }
        out: dict[str, Any] = {}
        for name, r in responses.items():
            out[name] = {"status": r.status_code}
            if r.status_code != 200:
                out[name]["body"] = r.text[:300]
            elif name == "search":
                out[name]["hits"] = len(r.json()["results"])
            elif name == "ask":
                out[name]["citations"] = len(r.json().get("citations") or [])
            elif name == "ask_stream":
                out[name]["error_event"] = "event: error" in r.text
        return out


def originals(home: Path) -> dict[str, Any]:
    """The stored originals: temporary (half-written) files left behind, and files whose bytes are not their name's
    hash."""
    folder = home / "files"
    if not folder.exists():
        return {"files": 0, "temporary": [], "corrupt": []}
    files = [p for p in folder.iterdir() if p.is_file()]
    return {"files": len(files),
            "temporary": [p.name for p in files if p.name.startswith(".")],
            "corrupt": [p.name for p in files if not p.name.startswith(".")
                        and hashlib.sha256(p.read_bytes()).hexdigest() != p.name]}


def scenario_service(work: Path) -> dict[str, Any]:
    """`citerag serve` on a small home: an upload on a full disk, the same upload once space returns, a document
    whose indexing meets a full disk (it stays pending, retried once space returns), then the home read-only."""
    docs, mnt = work / "docs", work / "mnt"
    texts = make_corpus(docs, 100)
    names = [n for n in sorted(texts) if n != FIRST]
    # A document bigger than the room left for it: its original and pending row fit, its chunks and vectors don't.
    big = work / "big-manual.md"
    big.write_text("".join(texts[n] for n in names[40:52]), encoding="utf-8")
    home = mnt / "home"
    log = work / "serve.log"
    out: dict[str, Any] = {}
    mount(mnt, "16m")
    server = Server(home, log)
    try:
        first = server.upload(docs / FIRST)
        out["first"] = {"upload": first["status"],
                        "settled": server.settle(first["body"]["documents"][0]["id"])["status"]}
        doc_id = first["body"]["documents"][0]["id"]

        filler = fill(mnt)
        out["full_upload"] = server.upload(docs / names[1])
        out["full_originals"] = originals(home)
        out["full_reads"] = server.reads(doc_id)
        filler.unlink()
        remount(mnt, "size=32m")
        again = server.upload(docs / names[1])
        out["again"] = {"upload": again["status"], "body": again["body"]}
        if again["status"] == 202:
            out["again"]["settled"] = server.settle(again["body"]["documents"][0]["id"])["status"]

        # Room for the upload and its pending row, not for its chunks and vectors.
        filler = fill(mnt, leave=(big.stat().st_size // 4096 + 12) * 4096)
        during = server.upload(big)
        out["during_index"] = {"upload": during["status"], "body": during["body"]}
        if during["status"] == 202:
            big_id = during["body"]["documents"][0]["id"]
            out["during_index"]["settled"] = server.settle(big_id)
            out["during_index_originals"] = originals(home)
            # A retry while the disk is still full (to the last page now): its job cannot even be journaled.
            rest = fill(mnt)
            full_retry = server.client.post(f"/v1/collections/default/documents/{big_id}/retry")
            out["during_index"]["full_retry"] = {"status": full_retry.status_code, "body": full_retry.json()}
            out["during_index"]["full_retry_settled"] = server.settle(big_id)["status"]
            out["jobs_temporary"] = sorted(p.name for p in (home / "jobs").glob("*.tmp")) \
                if (home / "jobs").exists() else []
            rest.unlink()
            filler.unlink()
            retried = server.client.post(f"/v1/collections/default/documents/{big_id}/retry")
            out["during_index"]["retry"] = retried.status_code
            out["during_index"]["after_retry"] = server.settle(big_id)["status"]
        else:
            filler.unlink()
        out["rw_examine"] = examine(home)
    finally:
        server.stop()

    remount(mnt, "ro")
    before = tree(mnt)
    server = Server(home, log)
    try:
        out["ro_reads"] = server.reads(doc_id)
        out["ro_upload"] = server.upload(docs / names[2])
        out["ro_originals"] = originals(home)
    finally:
        server.stop()
    out["ro_unchanged"] = tree(mnt) == before
    remount(mnt, "rw")
    server = Server(home, log)
    try:
        back = server.upload(docs / names[2])
        out["rw_upload"] = {"upload": back["status"]}
        if back["status"] == 202:
            out["rw_upload"]["settled"] = server.settle(back["body"]["documents"][0]["id"])["status"]
    finally:
        server.stop()
    out["final_examine"] = examine(home)
    out["final_originals"] = originals(home)
    out["log_tracebacks"] = log.read_text(errors="replace").count("Traceback")
    return out


SCENARIOS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "cli": scenario_cli, "sweep": scenario_sweep, "index_files": scenario_index_files, "service": scenario_service,
    "sync": scenario_sync}


def main() -> None:
    name, work = sys.argv[1], Path(sys.argv[2])
    result = SCENARIOS[name](work)
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
