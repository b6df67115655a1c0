"""The ingestion job queue: uploads are indexed in the background, one job per document, by one of two queues
behind `IngestQueue`. It sits below the application core (citerag.app), the service and the workers: a queue
never indexes anything itself, it runs each job through the handler it is given (citerag.app.uploads.index_upload).

    job.py            Job, the IngestQueue protocol, the handler's and on_finished's types
    thread.py         "thread" (the default): a thread of the API process; jobs not yet run are kept in a journal
                      (INDEX/jobs/) and run when a killed or stopped server starts again. One machine, one API
                      process.
    procrastinate.py  "procrastinate": jobs in the PostgreSQL store's own database (the task, its queue and
                      per-document locks, the schema, deferring and reading jobs), run by any number of
                      `citerag worker` processes on any machine (citerag.workers); they outlive every process.
    metrics.py        the ingest counters, exported by the API process (thread queue) or by each worker

The home's backend (citerag.backends) makes one: the settings' `queue` picks which.
"""

from __future__ import annotations

from citerag.jobs.job import Handler, IngestQueue, Job, OnFinished

__all__ = ["Handler", "IngestQueue", "Job", "OnFinished"]

