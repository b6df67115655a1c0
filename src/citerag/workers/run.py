"""`citerag worker`: one process running ingestion jobs, any number of them on any machines.

    citerag worker [--index DIR] [--concurrency N]

It needs `queue = "procrastinate"` and a postgresql:// store_url (config.toml, CITERAG_QUEUE, CITERAG_STORE_URL).
SIGINT or SIGTERM stops it gracefully: it takes no new job and finishes the running ones (a second signal stops it
at once; the job is then handed on after the lease, like a crash's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Coroutine
from typing import Any

from citerag.app.home import Citerag
from citerag.app.syncer import Syncer
from citerag.errors import CiteragError
from citerag.jobs.procrastinate import (
    QUEUE,
    SYNC_QUEUE,
    ProcrastinateQueue,
    ensure_schema_async,
    reaching,
    worker_app,
)
from citerag.settings import Settings
from citerag.workers import check
from citerag.workers.recovery import recover_forever
from citerag.workers.tasks import Runtime, register

log = logging.getLogger("citerag.workers")
# How often an idle worker looks for jobs besides NOTIFY (a job handed back by a recovery pass is an UPDATE,
# which sends no notification): one cheap indexed query a second.
POLL_S = 1.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_worker(settings: Settings, concurrency: int = 1, name: str | None = None,
               metrics: tuple[str, int] | None = None) -> None:
    """Run jobs until SIGINT/SIGTERM; with `metrics` (host, port), serve the ingest counters for Prometheus there."""
    check(settings)
    asyncio.run(_serve(settings, concurrency, name or f"{socket.gethostname()}-{os.getpid()}", metrics))


def _serve_metrics(runtime: Runtime, host: str, port: int) -> None:
    """The same ingest counters the API process exports with the thread queue, from this worker's jobs: with
    procrastinate the API process never sees an outcome, so each worker is scraped instead."""
    from prometheus_client import CollectorRegistry, start_http_server

    from citerag.app.uploads import counting
    from citerag.jobs.metrics import IngestMetrics

    registry = CollectorRegistry()
    runtime.on_finished = counting(runtime.core, IngestMetrics(registry).finished)
    start_http_server(port, addr=host, registry=registry)
    log.info("metrics on http://%s:%d/metrics", host, port)


async def _serve(settings: Settings, concurrency: int, name: str, metrics: tuple[str, int] | None) -> None:
    core = Citerag.open_home(settings)
    try:
        # The encoder loaded before the first job, not during it: a missing model fails the worker at start, and
        # the first document's run (and its lease) is not charged with seconds of loading.
        await asyncio.to_thread(core.encoder, settings.embedding_model)
        runtime = Runtime(settings, core)
        if metrics is not None:
            _serve_metrics(runtime, *metrics)
        app = worker_app(settings.store_url, concurrency)
        register(app, runtime)
        with reaching(settings.store_url, "open"):
            await app.open_async()
        try:
            await ensure_schema_async(app, settings.store_url)
            recovery = asyncio.create_task(recover_forever(app, runtime), name="citerag-recovery")
            # Sources due are deferred as sync jobs, which this worker or another runs (one per source at a time).
            deferrer = ProcrastinateQueue(settings)
            await asyncio.to_thread(deferrer.start)
            syncer = Syncer(core, deferrer)
            syncer.start()
            log.info("worker %s: running jobs of %s (concurrency %d, lease %gs, %d attempts)", name,
                     settings.safe_url, concurrency, runtime.lease_s, runtime.attempts)
            try:
                with reaching(settings.store_url, "run"):
                    await _until_signal(app.run_worker_async(
                        queues=[QUEUE, SYNC_QUEUE], name=name, concurrency=concurrency, wait=True,
                        # The lease: heartbeats every third of it, so one late beat is not a death.
                        update_heartbeat_interval=runtime.lease_s / 3, stalled_worker_timeout=runtime.lease_s,
                        fetch_job_polling_interval=POLL_S, install_signal_handlers=False))
            finally:
                await asyncio.to_thread(syncer.stop)
                await asyncio.to_thread(deferrer.stop)
                recovery.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await recovery
        finally:
            await app.close_async()
    finally:
        core.close()
    log.info("worker %s: stopped", name)


async def _until_signal(work: Coroutine[Any, Any, None]) -> None:
    """Run the procrastinate worker until SIGINT or SIGTERM, then stop it gracefully: no new job, the running ones
    finish (cancelling run_worker_async is its graceful stop); a second signal ends the process at once. A worker
    that stops on its own (its database connection failed) is an error, so that a service manager restarts it."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    signalled: list[int] = []

    def stop(signum: int) -> None:
        signalled.append(signum)
        log.info("stopping after the running documents (again to stop at once)")
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        task.cancel()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        await task
    except asyncio.CancelledError:
        if not signalled:
            raise
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    if not signalled:
        raise CiteragError("the worker stopped on its own: its connection to the queue's database failed "
                           "(see the lines above)")
