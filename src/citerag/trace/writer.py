"""Traces kept off the request path: an operation that ends hands its spans to its trace store's queue and goes
on; one writer thread per store takes what has queued, builds each record (citerag.trace.base.trace_row) and
keeps the lot in one transaction on a connection it holds while there is work.

    request thread                     writer thread (one per store, started by the first trace)
    store.submit(spans, ...)  ->  queue  ->  up to BATCH traces  ->  one transaction  ->  committed

What a caller can count on:

- submit() never blocks and never raises: a trace that cannot be kept (a full queue, a read-only or full disk, a
  database that is down) is logged as a warning and counted, and the operation it describes goes on.
- Read your writes in the process: a store's get() and count() first wait for every trace submitted before them
  (flush), so a trace id an operation returned opens right away through the same store, as GET /v1/traces/{id},
  `citerag trace show` and replay expect. write() is the synchronous form (the TraceStore protocol's): it waits
  for its own trace and raises what keeping it raised (TraceExists, an unavailable store).
- Another process (an API replica on the same PostgreSQL) reads a trace once its writer has committed it: in the
  time of one transaction after the operation ended (the writer wakes on each trace and never waits for a batch
  to fill), later only while the database is slow or the queue is long; never, if the process was killed first.
- A clean stop loses nothing: close() (a collection's close, the service's shutdown) writes what is queued before
  it returns, and so does the interpreter's exit (atexit) for a store never closed. A crash (SIGKILL, power loss)
  loses at most the traces still queued or not yet durable; it never touches documents or answers, which are
  kept elsewhere and never wait on a trace.

The queue is bounded (QUEUE_LIMIT traces): when the writer cannot keep up, a new trace is dropped and counted,
rather than making a request wait for the trace store. Traces are diagnostics, bounded anyway by `trace_keep`;
a request that waited on them would bring back exactly the latency (and the dependency on a slow disk or
database) that this module takes off the request path.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan

from citerag.errors import StoreUnavailable, first_line
from citerag.trace.base import TraceExists, TraceRow, trace_row
from citerag.trace.setup import trace_id_hex

log = logging.getLogger("citerag")

QUEUE_LIMIT = 10_000  # traces waiting for the writer; more are dropped (a few KB each: tens of MB at most)
BATCH = 256  # traces per transaction at most
IDLE_S = 10.0  # a writer with nothing to do for this long ends, and releases its connection (the next trace
# starts another): a store nobody closes holds no thread for long
FLUSH_TIMEOUT_S = 10.0  # how long a reader waits for the traces before it (then it reads what is there)
CLOSE_TIMEOUT_S = 30.0  # how long close() and the interpreter's exit wait for the queue to be written
DROP_WARNING_EVERY_S = 10.0  # one warning per this many seconds while traces are being dropped


class RowSink(Protocol):
    """A writer thread's hold on its store (a connection, or the pool it borrows from), opened when the thread
    starts and closed when it ends."""

    def write(self, rows: Sequence[TraceRow]) -> list[bool]:
        """Keep `rows` (oldest first) in one transaction and prune to the store's `keep`; per row, whether it was
        added (False: a trace was already kept under its id, and is left as it was). Raises StoreUnavailable when
        the store cannot be written at all (nothing kept); anything else makes the writer try the rows one by
        one, so that one row the store refuses loses only itself."""
        ...

    def close(self) -> None:
        ...


class Pending:
    """One operation's trace on its way to the store."""

    __slots__ = ("added", "collection", "error", "options", "seq", "spans", "sync", "texts")

    def __init__(self, spans: Sequence[ReadableSpan], options: dict[str, Any], collection: str,
                 texts: dict[str, str] | None, sync: bool = False) -> None:
        self.spans, self.options, self.collection, self.texts, self.sync = spans, options, collection, texts, sync
        self.seq = 0
        self.added = False
        self.error: BaseException | None = None

    @property
    def trace_id(self) -> str:
        root = self.spans[-1]
        return trace_id_hex(root.context.trace_id) if root.context is not None else "?"


class TraceWriter:
    """One trace store's queue and its writer thread (see the module's docstring)."""

    def __init__(self, open_sink: Callable[[], RowSink], where: str, *, limit: int = QUEUE_LIMIT,
                 batch: int = BATCH, idle_s: float = IDLE_S) -> None:
        self._open_sink = open_sink
        self.where = where
        self.limit, self.batch, self.idle_s = limit, batch, idle_s
        self.dropped = 0  # traces not queued because the queue was full
        self.failed = 0  # traces the store could not keep (TraceExists not counted)
        self._reset()
        _writers.add(self)

    def _reset(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[Pending] = deque()
        self._seq = 0  # the last trace queued
        self._done = 0  # the last trace the writer has finished with (kept or not)
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._last_drop_warning = float("-inf")

    @property
    def pending(self) -> int:
        with self._cond:
            return self._seq - self._done

    def submit(self, item: Pending) -> None:
        """Queue a trace and return at once: never blocks on the store, never raises."""
        with self._cond:
            if len(self._queue) >= self.limit:
                self.dropped += 1
                now = time.monotonic()
                warn = now - self._last_drop_warning >= DROP_WARNING_EVERY_S
                if warn:
                    self._last_drop_warning = now
                dropped, waiting = self.dropped, len(self._queue)
            else:
                self._enqueue(item)
                return
        if warn:
            log.warning("trace %s not kept: %d traces already wait for %s (%d dropped so far)",
                        item.trace_id, waiting, self.where, dropped)

    def write(self, item: Pending, timeout: float | None = None) -> None:
        """Queue a trace, waiting for room, and wait until it is written; raise what writing it raised."""
        item.sync = True
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._queue) >= self.limit:
                self._cond.wait(None if deadline is None else max(deadline - time.monotonic(), 0))
                if deadline is not None and time.monotonic() >= deadline:
                    raise StoreUnavailable(f"trace {item.trace_id} not kept: {self.where} is not keeping up")
            self._enqueue(item)
            seq = item.seq
            if not self._cond.wait_for(lambda: self._done >= seq,
                                       None if deadline is None else max(deadline - time.monotonic(), 0)):
                raise StoreUnavailable(f"trace {item.trace_id} not written to {self.where} in time")
        if item.error is not None:
            raise item.error

    def _enqueue(self, item: Pending) -> None:  # under self._cond
        self._seq += 1
        item.seq = self._seq
        self._queue.append(item)
        if self._thread is None:
            self._start()
        else:
            self._cond.notify_all()

    def _start(self) -> None:  # under self._cond
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"citerag-traces {self.where}", daemon=True)
        self._thread.start()

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Wait until every trace queued before this call is written (or has failed); False on timeout."""
        with self._cond:
            target = self._seq
            if self._done >= target:
                return True
            if self._thread is None:  # not expected (a thread runs while traces wait); never wait on nothing
                self._start()
            return self._cond.wait_for(lambda: self._done >= target, timeout)

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> bool:
        """Write what is queued, then end the writer thread (and release its connection). The store stays usable:
        a later trace starts a writer again. False when the queue was not written within `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                log.warning("%d trace(s) for %s still unwritten after %.0f s", self.pending, self.where, timeout)
                return False
        return True

    def _run(self) -> None:
        sink: RowSink | None = None
        try:
            while True:
                with self._cond:
                    if not self._queue and not self._stopping:
                        self._cond.wait_for(lambda: self._queue or self._stopping, self.idle_s)
                    if not self._queue:  # idle, or told to stop with nothing left
                        self._thread = None
                        self._cond.notify_all()
                        return
                    batch = [self._queue.popleft() for _ in range(min(self.batch, len(self._queue)))]
                    self._cond.notify_all()  # room in the queue for a write() that waits for it
                try:
                    if sink is None:
                        sink = self._open_sink()
                    self._keep(sink, batch)
                except Exception as exc:  # the store could not be reached or opened: the whole batch lost
                    self._failed(batch, exc)
                    _closed(sink)  # a connection that failed is not trusted with the next batch
                    sink = None
                with self._cond:
                    self._done = batch[-1].seq
                    self._cond.notify_all()
        finally:
            _closed(sink)
            with self._cond:  # ended by something unforeseen: the next trace starts another writer
                if self._thread is threading.current_thread():
                    self._thread = None
                self._cond.notify_all()

    def _keep(self, sink: RowSink, batch: list[Pending]) -> None:
        rows: list[tuple[Pending, TraceRow]] = []
        for item in batch:
            try:
                rows.append((item, trace_row(item.spans, item.options, item.collection, item.texts)))
            except Exception as exc:  # one operation's spans that make no record: that trace only
                self._failed([item], exc)
        if not rows:
            return
        try:
            added = sink.write([row for _, row in rows])
        except StoreUnavailable:
            raise
        except Exception:
            if len(rows) == 1:
                raise
            added = []
            for item, row in rows:  # one row the store refuses (a value it cannot take) loses only itself
                try:
                    added += sink.write([row])
                except StoreUnavailable:
                    raise
                except Exception as exc:
                    self._failed([item], exc)
                    added.append(True)  # reported: not a TraceExists
        for (item, _), kept in zip(rows, added, strict=True):
            if item.error is not None:
                continue
            item.added = kept
            if not kept:
                exists = TraceExists(f"trace {item.trace_id} is already kept")
                if item.sync:
                    item.error = exists
                else:  # not a fault of the store: a second operation in one trace
                    log.warning("trace %s not kept: %s", item.trace_id, exists)

    def _failed(self, items: list[Pending], exc: BaseException) -> None:
        items = [item for item in items if item.error is None]  # each failure told once
        quiet = [item for item in items if not item.sync]  # a write() raises it to its caller instead
        for item in items:
            item.error = exc
        if not quiet:
            return
        self.failed += len(quiet)
        # The cause in the line itself: the CLI shows a warning's message only (a full or read-only disk).
        if len(quiet) == 1:
            log.warning("trace %s not kept (%s)", quiet[0].trace_id, first_line(exc))
        else:
            log.warning("%d traces not kept (%s)", len(quiet), first_line(exc))
        log.debug("trace not kept", exc_info=exc)


def _closed(sink: RowSink | None) -> None:
    if sink is not None:
        try:
            sink.close()
        except Exception as exc:  # closing what already failed
            log.debug("closing the trace store's connection: %s", exc)


_writers: weakref.WeakSet[TraceWriter] = weakref.WeakSet()


@atexit.register
def _write_all_at_exit() -> None:
    """At the interpreter's exit (after the main thread ended, before the writers' daemon threads are stopped):
    whatever is queued in a store nobody closed is written."""
    deadline = time.monotonic() + CLOSE_TIMEOUT_S
    for writer in list(_writers):
        writer.close(max(deadline - time.monotonic(), 0))


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads, and its parent's queued traces are the parent's to write:
    each writer starts empty there."""
    for writer in list(_writers):
        writer._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
