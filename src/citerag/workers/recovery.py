"""Jobs of dead workers: procrastinate's stalled-job recipe, with the lease and the bound on attempts.

A worker SIGKILLed (or OOM-killed, or on a machine that lost power) mid-document never marks its job: the job
stays `doing` under that worker's id, and its per-document lock keeps every other job of the document waiting.
procrastinate's workers write a heartbeat every lease/3 seconds; `get_stalled_jobs` lists the `doing` jobs of
workers whose heartbeat is older than the lease (or whose row was already pruned). procrastinate leaves acting
on them to the application (the documented recipe retries them from a periodic task); here each worker runs the
pass every lease/2 seconds beside its jobs, rather than as a periodic job, because a periodic job would itself
be lost with a killed worker and would wait for a cron minute.

A stalled job has had `attempts + 1` runs (procrastinate's `attempts` counts the runs that ended in a retry).
Under `queue_attempts` it is handed back at once (any worker takes it); at the bound its document ends `failed`
with the reason and the job `failed`, so a file that kills every worker that opens it stops after a bounded
number of crashes, and it never holds other documents back (their jobs have their own locks).

Only one worker runs a pass at a time (a session advisory lock, released if that worker dies): a job one pass has
handed back and another worker has started is never handed back again by a second pass with an older list.
"""

from __future__ import annotations

import asyncio
import logging
import time

import procrastinate
import psycopg
from procrastinate.jobs import Status

from citerag.jobs.procrastinate import QUEUE, TASK, job_of, reaching
from citerag.workers.tasks import Runtime

log = logging.getLogger("citerag.workers")

RECOVERY_LOCK = 0x63697465726172  # "citerar": one pass at a time across every worker of the database


async def recover_stalled(app: procrastinate.App, runtime: Runtime) -> tuple[int, int]:
    """One pass: (jobs retried, jobs given up), or (0, 0) when another worker holds the pass."""
    url = runtime.settings.store_url
    retried = given_up = 0
    with reaching(url, "recover jobs of"):
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as conn:
            cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", (RECOVERY_LOCK,))
            row = await cursor.fetchone()
            if row is None or not row[0]:
                return 0, 0
            try:
                stalled = await app.job_manager.get_stalled_jobs(queue=QUEUE, task_name=TASK,
                                                                 seconds_since_heartbeat=runtime.lease_s)
                for job in stalled:
                    assert job.id is not None
                    runs = job.attempts + 1
                    ours = job_of(job)
                    if runs >= runtime.attempts:
                        reason = (f"indexing stopped {runs} time(s) before it finished: the worker was killed or "
                                  f"crashed (out of memory?); gave up after {runs} attempts (queue_attempts)")
                        await asyncio.to_thread(runtime.give_up, ours, reason)
                        await app.job_manager.finish_job_by_id_async(job.id, Status.FAILED, delete_job=False)
                        given_up += 1
                    else:
                        log.warning("document %s of %s: its worker stopped mid-document (no heartbeat for %gs); "
                                    "retried (attempt %d of %d)", ours.document_id, ours.collection,
                                    runtime.lease_s, runs + 1, runtime.attempts)
                        await app.job_manager.retry_job(job)
                        retried += 1
                await prune_finished(app, runtime)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (RECOVERY_LOCK,))
    return retried, given_up


# Succeeded jobs are kept a week (what ran when, for an operator), then deleted, so that the jobs table does not
# grow with every upload forever. Failed jobs are kept: a retry of a failed replacement finds its bytes through
# its job (citerag.jobs.procrastinate, last_submitted).
KEEP_SUCCEEDED_H = 24 * 7
PRUNE_EVERY_S = 3600.0


async def prune_finished(app: procrastinate.App, runtime: Runtime) -> None:
    """Delete this queue's succeeded jobs older than KEEP_SUCCEEDED_H, at most once an hour per worker."""
    now = time.monotonic()
    if now - runtime.pruned_at < PRUNE_EVERY_S:
        return
    runtime.pruned_at = now
    await app.job_manager.delete_old_jobs(nb_hours=KEEP_SUCCEEDED_H, queue=QUEUE)


async def recover_forever(app: procrastinate.App, runtime: Runtime) -> None:
    """A pass every lease/2 seconds until cancelled; a failed pass is logged and tried again next time."""
    while True:
        try:
            await recover_stalled(app, runtime)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the worker's own jobs go on; the next pass tries again
            log.warning("recovering stalled jobs failed: %s", exc)
        await asyncio.sleep(runtime.lease_s / 2)
