"""What the queue tests share: a home whose config names a PostgreSQL store and the procrastinate queue, real
`citerag worker` subprocesses, uploads submitted the way the API submits them, and read-only looks at the
database (the store's change log and chunks, procrastinate's jobs table) that never trust a worker's word.

A plain module (not conftest): `from queue_harness import ...`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg

from citerag.app.home import Citerag, open_queue
from citerag.app.uploads import index_upload
from citerag.ingest.files import Source
from citerag.jobs import Job
from citerag.settings import Settings, load_settings
from citerag.types import UPLOAD_SCHEME

HERE = Path(__file__).resolve().parent
LEASE_S = 4.0  # short, so that a dead worker's job moves on within seconds
ATTEMPTS = 3
T = TypeVar("T")


def make_home(folder: Path, pg_url: str, **extra: Any) -> Settings:
    """A home folder whose config.toml sends the store and the queue to PostgreSQL (every process reads it)."""
    folder.mkdir(parents=True, exist_ok=True)
    values = {"store_url": pg_url, "queue": "procrastinate", "queue_lease_s": LEASE_S, "queue_attempts": ATTEMPTS,
              **extra}
    lines = [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in values.items()]
    (folder / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return load_settings(folder)


def serve(home: Path, log: Path) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """A real `citerag serve --no-keys` of the home on a free loopback port, its output in `log`, and a client of
    it (wait for it with api_up)."""
    from citerag.local_postgres import free_port

    port = free_port()
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "citerag.cli", "serve", "--index", str(home), "--no-keys",
                                   "--port", str(port)], stdout=out, stderr=out, start_new_session=True)
    return server, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)


def api_up(client: httpx.Client, path: str) -> bool:
    """Whether a `citerag serve` answers GET `path` with a 200 yet."""
    try:
        return client.get(path).status_code == 200
    except httpx.TransportError:
        return False


def wait_for(what: str, check: Callable[[], T | None], timeout: float, every: float = 0.2) -> T:
    """Poll `check` until it returns something truthy; an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(every)


@dataclass
class Worker:
    """One `citerag worker` process (or the test's poisoned variant), its output in a log file."""

    home: Path
    log: Path
    script: Path | None = None  # a wrapper run instead of `python -m citerag.cli`
    process: subprocess.Popen[bytes] | None = None
    args: tuple[str, ...] = ()  # more options of `citerag worker`

    def start(self) -> Worker:
        command = [sys.executable, str(self.script)] if self.script else [sys.executable, "-m", "citerag.cli"]
        out = open(self.log, "ab")  # noqa: SIM115 - the child writes to it until it ends
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([*command, "worker", "--index", str(self.home), *self.args], stdout=out,
                                        stderr=out,
                                        env=env, start_new_session=True)
        out.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM (a graceful stop), then SIGKILL past `timeout`; the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return int(self.process.returncode)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""


@dataclass
class Pool:
    """Workers started and, like a service manager's restart policy, started again when one dies."""

    home: Path
    logs: Path
    script: Path | None = None
    workers: list[Worker] = field(default_factory=list)
    deaths: list[int] = field(default_factory=list)  # exit statuses of the workers that died
    _replaced: set[int] = field(default_factory=set)

    def start(self, n: int) -> Pool:
        for _ in range(n):
            self.add()
        return self

    def add(self) -> Worker:
        worker = Worker(self.home, self.logs / f"worker-{len(self.workers) + 1}.log", self.script).start()
        self.workers.append(worker)
        return worker

    def supervise(self) -> None:
        """Replace every worker that died since the last call."""
        for worker in list(self.workers):
            code = worker.process.poll() if worker.process is not None else None
            if code is not None and worker.pid not in self._replaced:
                self._replaced.add(worker.pid)
                self.deaths.append(code)
                self.add()

    def stop(self) -> list[int]:
        """Stop every worker still running; their exit statuses."""
        return [w.stop() for w in self.workers if w.alive()]

    def output(self) -> str:
        return "\n".join(f"--- {w.log.name}\n{w.output()}" for w in self.workers)


def submit(settings: Settings, files: list[tuple[str, bytes]]) -> dict[str, int]:
    """Upload `files` as the API does (original saved, document accepted pending, one job deferred each): file
    name -> document id."""
    ids: dict[str, int] = {}
    with Citerag.open_home(settings) as core:
        collection = core.collection()
        queue = open_queue(settings, partial(index_upload, core))
        queue.start()
        try:
            for name, data in files:
                sha = collection.save_original(data)
                doc = collection.accept(Source(UPLOAD_SCHEME + name, data, name)).document
                queue.submit(Job(collection.name, doc.id, doc.name, sha))
                ids[name] = doc.id
        finally:
            queue.stop()
    return ids


class Database:
    """Read-only looks at the shared database: what happened, from the rows themselves."""

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)

    def close(self) -> None:
        self.conn.close()

    def rows(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return self.conn.execute(sql, args).fetchall()  # type: ignore[arg-type]

    def documents(self) -> dict[int, tuple[str, str | None, int]]:
        """Document id -> (status, error, chunk_count)."""
        return {r[0]: (r[1], r[2], r[3]) for r in self.rows("SELECT id, status, error, chunk_count FROM documents")}

    def changes(self, document_id: int) -> int:
        """Committed changes of the document in the store's change log: 1 for being accepted, 1 more per index
        run that committed (or failure stored)."""
        return int(self.rows("SELECT count(*) FROM changes WHERE document_id = %s", document_id)[0][0])

    def chunk_rows(self, document_id: int) -> tuple[int, int, int]:
        """(chunks, distinct ordinals, vectors) stored for the document."""
        row = self.rows("SELECT count(*), count(DISTINCT ordinal) FROM chunks WHERE document_id = %s", document_id)[0]
        vectors = self.rows("SELECT count(*) FROM chunk_vectors WHERE document_id = %s", document_id)[0][0]
        return int(row[0]), int(row[1]), int(vectors)

    def jobs(self) -> list[dict[str, Any]]:
        cursor = self.conn.cursor(row_factory=psycopg.rows.dict_row)
        return cursor.execute("SELECT id, status, attempts, lock, worker_id, args FROM procrastinate_jobs"
                              " ORDER BY id").fetchall()

    def job_of(self, document_id: int) -> dict[str, Any]:
        found = [j for j in self.jobs() if j["args"]["document_id"] == document_id]
        assert len(found) == 1, found
        return found[0]

    def live_workers(self) -> int:
        if self.rows("SELECT to_regclass('procrastinate_workers')")[0][0] is None:
            return 0
        return int(self.rows("SELECT count(*) FROM procrastinate_workers")[0][0])

    def settled(self, ids: list[int]) -> bool:
        docs = self.documents()
        return all(i in docs and docs[i][0] != "pending" for i in ids)


@contextmanager
def database(url: str) -> Iterator[Database]:
    db = Database(url)
    try:
        yield db
    finally:
        db.close()
