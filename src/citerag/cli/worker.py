"""`citerag worker`: run the procrastinate queue's jobs, uploads to index and sources to sync (see citerag.workers)."""

from __future__ import annotations

import logging
import time

import click

from citerag.cli.options import index_option
from citerag.settings import load_settings


class _Lines(logging.Handler):
    """One line per event on stderr, with the time: what a worker did, for its operator and its log."""

    def emit(self, record: logging.LogRecord) -> None:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        click.echo(f"{stamp} {record.levelname.lower()}: {record.getMessage()}", err=True)


@click.command("worker")
@index_option
@click.option("--concurrency", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Documents this process indexes at once (each in a thread; the encoder is shared).")
@click.option("--metrics-port", type=click.IntRange(1, 65535), default=None,
              help="Serve this worker's ingest counters (citerag_ingest_documents_total, ..._chunks_total) for "
                   "Prometheus at http://HOST:PORT/metrics.")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address the metrics listen on (another machine's Prometheus needs this machine's address).")
def worker_command(index: str | None, concurrency: int, metrics_port: int | None, metrics_host: str) -> None:
    """Index uploads and sync sources from the procrastinate queue (queue = "procrastinate", a postgresql:// store).

    Run any number, on any machines; SIGINT or SIGTERM stops one after its running documents."""
    from citerag.workers import check

    settings = load_settings(index)
    check(settings)  # before anything loads: one line naming the setting
    from citerag.workers.run import run_worker
    ours = logging.getLogger("citerag.workers")
    ours.setLevel(logging.INFO)
    ours.addHandler(_Lines(logging.INFO))
    ours.propagate = False
    theirs = logging.getLogger("procrastinate")
    theirs.setLevel(logging.WARNING)
    theirs.addHandler(_Lines(logging.WARNING))
    theirs.propagate = False
    run_worker(settings, concurrency, metrics=(metrics_host, metrics_port) if metrics_port else None)
