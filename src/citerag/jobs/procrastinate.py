"""The shared queue in procrastinate's terms: with `queue = "procrastinate"`, uploads, replacements and retries
defer one job per document into the PostgreSQL store's own database, and `citerag worker` processes on any machine
run them (citerag.workers, where the choice of procrastinate is explained). The API processes only defer jobs and
read their state (ProcrastinateQueue); they never index. Status and the event stream read the document's status
from the store as with the thread queue, and each document's job state ("queued" / "running") and the queue depth
from procrastinate's jobs table.

One job per document: the task `citerag.index_document(collection, document_id, sha256, name)` on the queue
`citerag-ingest`, with the procrastinate lock `citerag-doc:<collection>:<document id>`: a worker never starts a
document's job while another job of the same document is running (even on a worker that died and has not been
recovered yet), and jobs of one document run in the order they were deferred. Jobs of other documents never
wait for it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import procrastinate
import psycopg
from procrastinate import JobContext
from procrastinate import exceptions as pexc
from procrastinate import jobs as pjobs

from citerag.errors import CiteragError, StoreUnavailable, first_line
from citerag.jobs.job import Job, OnFinished
from citerag.settings import Settings, redact_url

TASK = "citerag.index_document"
QUEUE = "citerag-ingest"
LOCK_PREFIX = "citerag-doc"
# A session advisory lock id for applying procrastinate's schema once when N processes start at once.
SCHEMA_LOCK = 0x63697465726171  # "citeraq"


def lock_for(collection: str, document_id: int) -> str:
    return f"{LOCK_PREFIX}:{collection}:{document_id}"


# A source's sync (citerag.app.sources) is a job of its own queue, so the ingest queue's recovery and depth never
# see it: at most one waits per source (queueing lock) and one runs (lock), on whichever worker takes it.
SYNC_TASK = "citerag.sync_source"
SYNC_QUEUE = "citerag-sources"


def sync_lock(collection: str, source: str) -> str:
    return f"citerag-source:{collection}:{source}"


def collection_prefix(collection: str) -> str:
    """What every lock of the collection's jobs starts with (names never contain ':')."""
    return f"{LOCK_PREFIX}:{collection}:"


@contextmanager
def reaching(url: str, doing: str) -> Iterator[None]:
    """The queue's database unreachable: a one-line StoreUnavailable (the API answers 503, the CLI one line)."""
    try:
        yield
    except (psycopg.OperationalError, pexc.ConnectorException) as exc:
        if isinstance(exc, pexc.UniqueViolation):
            raise
        raise StoreUnavailable(f"cannot {doing} the job queue at {redact_url(url)}: {first_line(exc)}") from exc


def api_app(url: str) -> procrastinate.App:
    """The App an API process defers with (a small synchronous pool; open it with `.open()`)."""
    connector = procrastinate.SyncPsycopgConnector(conninfo=url, min_size=1, max_size=4,
                                                   kwargs={"connect_timeout": 10})
    return procrastinate.App(connector=connector)


def worker_app(url: str, concurrency: int) -> procrastinate.App:
    """The App a worker runs jobs with (asynchronous; the task is registered by tasks.register)."""
    connector = procrastinate.PsycopgConnector(conninfo=url, min_size=1, max_size=concurrency + 3,
                                               kwargs={"connect_timeout": 10})
    return procrastinate.App(connector=connector)


def ensure_schema(app: procrastinate.App, url: str) -> None:
    """procrastinate's tables and functions, applied by its own schema manager the first time the queue is used.

    `apply_schema` is neither idempotent nor safe when several processes start at once, so the check and the
    apply run under one advisory lock, on a connection of our own; the others wait, then find the tables."""
    with reaching(url, "prepare"), psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
        try:
            if not app.check_connection():
                app.schema_manager.apply_schema()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))


async def ensure_schema_async(app: procrastinate.App, url: str) -> None:
    """ensure_schema for a worker's asynchronous App."""
    with reaching(url, "prepare"):
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as conn:
            await conn.execute("SELECT pg_advisory_lock(%s)", (SCHEMA_LOCK,))
            try:
                if not await app.check_connection_async():
                    await app.schema_manager.apply_schema_async()
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (SCHEMA_LOCK,))


def defer(app: procrastinate.App, job: Job) -> int:
    """Queue `job`; its procrastinate id."""
    task = app.configure_task(TASK, allow_unknown=True, queue=QUEUE,
                              lock=lock_for(job.collection, job.document_id))
    return int(task.defer(collection=job.collection, document_id=job.document_id, sha256=job.sha256,
                          name=job.name))


def register_task(app: procrastinate.App, run: Callable[[Job, int], Any], attempts: int) -> None:
    """Register the task on a worker's App: each job runs as `run(job, attempt)` (1 for its first run), a raised
    error retried until the job has had `attempts` runs."""
    # Retries of a raised error: 2 s, 4 s, 8 s ... (max_attempts counts retries; 0 would mean forever).
    retry: procrastinate.RetryStrategy | bool = \
        procrastinate.RetryStrategy(max_attempts=attempts - 1, exponential_wait=2) if attempts > 1 else False

    @app.task(name=TASK, queue=QUEUE, pass_context=True, retry=retry)
    def index_document(context: JobContext, collection: str, document_id: int, sha256: str, name: str) -> Any:
        return run(Job(collection, document_id, name, sha256), context.job.attempts + 1)


def defer_sync(app: procrastinate.App, collection: str, source: str) -> None:
    """Queue a sync of the source, unless one already waits."""
    lock = sync_lock(collection, source)
    task = app.configure_task(SYNC_TASK, allow_unknown=True, queue=SYNC_QUEUE, lock=lock, queueing_lock=lock)
    with contextlib.suppress(pexc.AlreadyEnqueued):  # one waits already: it syncs what is there when it runs
        task.defer(collection=collection, source=source)


def register_sync_task(app: procrastinate.App, run: Callable[[str, str], Any]) -> None:
    """Register the sync task on a worker's App: `run(collection, source)`; a failing origin is the sync's own
    status and backoff (never retried here)."""

    @app.task(name=SYNC_TASK, queue=SYNC_QUEUE)
    def sync_source(collection: str, source: str) -> Any:
        return run(collection, source)


def job_of(job: pjobs.Job) -> Job:
    """Our job from a procrastinate job's arguments."""
    args: dict[str, Any] = job.task_kwargs
    try:
        return Job(str(args["collection"]), int(args["document_id"]), str(args["name"]), str(args["sha256"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CiteragError(f"job {job.id} has unexpected arguments: {args!r}") from exc


_ACTIVE = """
SELECT lock, status FROM procrastinate_jobs
 WHERE queue_name = %(queue)s AND status IN ('todo', 'doing') AND starts_with(lock, %(prefix)s)
"""


def active_jobs(app: procrastinate.App, collection: str) -> dict[int, str]:
    """Document id -> "queued" or "running", for the collection's documents that have a job waiting or running
    (one query for a whole collection: the status list and its event stream ask for every document)."""
    prefix = collection_prefix(collection)
    rows = app.connector.get_sync_connector().execute_query_all(query=_ACTIVE, queue=QUEUE, prefix=prefix)
    out: dict[int, str] = {}
    for row in rows:
        doc_id = int(str(row["lock"])[len(prefix):])
        state = "running" if row["status"] == "doing" else "queued"
        if out.get(doc_id) != "running":
            out[doc_id] = state
    return out


def depth(app: procrastinate.App) -> int:
    """Jobs waiting for a worker."""
    return sum(int(q["todo"]) for q in app.job_manager.list_queues(queue=QUEUE))


def document_jobs(app: procrastinate.App, collection: str, document_id: int,
                  status: str | None = None) -> list[pjobs.Job]:
    """The document's jobs (every state, or `status`), oldest first."""
    found = app.job_manager.list_jobs(queue=QUEUE, lock=lock_for(collection, document_id), status=status)
    return sorted(found, key=lambda j: j.id or 0)


STATE_TTL_S = 0.25  # a collection's job states are read at most this often (an event stream polls every 0.3 s)


class ProcrastinateQueue:
    """The queue an API process holds: it defers jobs and reads their state; workers run them (register_task)."""

    def __init__(self, settings: Settings) -> None:
        self.url = settings.store_url
        self.lease_s = settings.queue_lease_s
        self.app = api_app(self.url)
        # Outcomes are seen by the workers, not here (the metrics' ingest counters stay at zero in this mode).
        self.on_finished: OnFinished | None = None
        self._states: dict[str, tuple[float, dict[int, str]]] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        with reaching(self.url, "open"):
            self.app.open()
        ensure_schema(self.app, self.url)

    def stop(self, timeout: float = 30.0) -> None:
        self.app.close()

    def submit(self, job: Job) -> None:
        with reaching(self.url, "write to"):
            defer(self.app, job)
        with self._lock:
            self._states.pop(job.collection, None)

    def state(self, collection: str, document_id: int) -> str | None:
        now = time.monotonic()
        with self._lock:
            cached = self._states.get(collection)
        if cached is None or now - cached[0] > STATE_TTL_S:
            with reaching(self.url, "read"):
                cached = (now, active_jobs(self.app, collection))
            with self._lock:
                self._states[collection] = cached
        return cached[1].get(document_id)

    def depth(self) -> int:
        with reaching(self.url, "read"):
            return depth(self.app)

    def cancel(self, collection: str, document_id: int) -> None:
        """Waiting jobs are cancelled; a running one is waited for (its worker may be dead: then until the lease
        hands it on and the next run finds the document gone), at most twice the lease."""
        with reaching(self.url, "write to"):
            for job in document_jobs(self.app, collection, document_id, status="todo"):
                assert job.id is not None
                self.app.job_manager.cancel_job_by_id(job.id)
            deadline = time.monotonic() + 2 * self.lease_s
            while document_jobs(self.app, collection, document_id, status="doing") \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
        with self._lock:
            self._states.pop(collection, None)

    def last_submitted(self, collection: str, document_id: int) -> Job | None:
        with reaching(self.url, "read"):
            found = document_jobs(self.app, collection, document_id)
        return job_of(found[-1]) if found else None

    def submit_sync(self, collection: str, source: str) -> bool:
        with reaching(self.url, "write to"):
            defer_sync(self.app, collection, source)
        return True
