"""The ingestion queue in procrastinate's terms, shared by the API processes (which defer jobs and read their
state) and the workers (which run them).

One job per document: the task `citerag.index_document(collection, document_id, sha256, name)` on the queue
`citerag-ingest`, with the procrastinate lock `citerag-doc:<collection>:<document id>`: a worker never starts a
document's job while another job of the same document is running (even on a worker that died and has not been
recovered yet), and jobs of one document run in the order they were deferred. Jobs of other documents never
wait for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import procrastinate
import psycopg
from procrastinate import exceptions as pexc
from procrastinate import jobs as pjobs

from citerag.errors import CiteragError, StoreUnavailable, first_line
from citerag.service.jobs import Job
from citerag.settings import redact_url

TASK = "citerag.index_document"
QUEUE = "citerag-ingest"
LOCK_PREFIX = "citerag-doc"
# A session advisory lock id for applying procrastinate's schema once when N processes start at once.
SCHEMA_LOCK = 0x63697465726171  # "citeraq"


def lock_for(collection: str, document_id: int) -> str:
    return f"{LOCK_PREFIX}:{collection}:{document_id}"


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
