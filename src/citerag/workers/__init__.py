"""Ingestion workers: uploads become jobs, one per document, run by any number of `citerag worker` processes.

Why procrastinate (https://procrastinate.readthedocs.io): its jobs live in the PostgreSQL database the store
already uses, so there is no second service to operate, back up or secure (no Redis or broker next to the
database); deferring a job is one INSERT (with LISTEN/NOTIFY to wake workers); it is maintained, typed, and
has what this needs built in: per-key locks (no document indexed twice at once), retries with backoff, worker
heartbeats and stalled-job detection (a killed worker's job goes to another worker), and a jobs table the
API reads for status and queue depth. Dramatiq, RQ or Celery would each need Redis or a broker beside it.

    tasks.py     the task itself: index one document through the application core (citerag.app.uploads), bounded
                 attempts
    recovery.py  jobs of dead workers: retried after the lease, or failed once out of attempts
    run.py       `citerag worker`: one process, its tasks, its heartbeats and its recovery pass

The job's name, queue and lock, the schema, deferring and reading jobs (the API processes' side too) live in
citerag.jobs.procrastinate, below the application core.
"""

from __future__ import annotations

from citerag.errors import CiteragError
from citerag.settings import Settings


def check(settings: Settings) -> None:
    """The settings a worker needs, each as one line (before procrastinate or any model is loaded)."""
    if settings.store_scheme != "postgresql":
        raise CiteragError("the procrastinate queue needs a postgresql:// store_url (store_url in config.toml or "
                           "CITERAG_STORE_URL)")
    if settings.queue != "procrastinate":
        raise CiteragError(f"queue is {settings.queue!r}: workers run the procrastinate queue; set queue = "
                           "\"procrastinate\" (config.toml or CITERAG_QUEUE) for the API and the workers")
    try:
        import procrastinate  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as exc:
        raise CiteragError(f"workers need the PostgreSQL extra ({exc.name} is missing): "
                           "pip install 'citerag[postgres]'") from exc
