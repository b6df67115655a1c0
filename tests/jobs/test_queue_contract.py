"""What every job queue must do (citerag.jobs.IngestQueue), against each backend for real: the thread queue over
a journal folder; the procrastinate queue over a real PostgreSQL (pg_url) with a procrastinate worker in this
process running jobs through the task the workers register. The handler is the test's own (Backend.handle): it
records each job it starts and finishes, and holds a job "running" until released. Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest

from citerag.backends import open_backend
from citerag.errors import StoreUnavailable
from citerag.jobs import IngestQueue, Job
from citerag.jobs.procrastinate import QUEUE, ensure_schema_async, register_task, worker_app
from citerag.settings import Settings

WAIT_S = 20.0


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)
    return value


def job(doc: int, version: str = "v1", collection: str = "default") -> Job:
    return Job(collection, doc, f"{doc}.md", f"{doc}-{version}")


class Backend:
    """One queue backend with the test's handler; `open()` gives a started queue over the backend's storage."""

    capacity = 1  # jobs run at once

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.started: list[Job] = []  # in the order they started
        self.ran: list[Job] = []  # in the order they finished
        self.overlaps: list[Job] = []  # jobs that started while another job of their document ran
        self.entered: dict[Job, threading.Event] = {}  # set once the job started
        self._gates: dict[Job, threading.Event] = {}  # held jobs
        self._active: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self.down = False  # the store is unavailable: the handler raises StoreUnavailable
        self.queues: list[IngestQueue] = []

    def handle(self, j: Job) -> str:
        if self.down:
            raise StoreUnavailable("the test's store is down")
        key = (j.collection, j.document_id)
        with self._lock:
            if key in self._active:
                self.overlaps.append(j)
            self._active.add(key)
            self.started.append(j)
            gate = self._gates.get(j)
        self.entered.setdefault(j, threading.Event()).set()
        try:
            if gate is not None:
                assert gate.wait(WAIT_S), f"{j} held too long"
            time.sleep(0.01)
        finally:
            with self._lock:
                self._active.discard(key)
                self.ran.append(j)
        return "indexed"

    def hold(self, j: Job) -> None:
        """`j` stays running until release()."""
        self._gates.setdefault(j, threading.Event())

    def release(self) -> None:
        for gate in self._gates.values():
            gate.set()

    def running(self, j: Job) -> None:
        assert self.entered.setdefault(j, threading.Event()).wait(WAIT_S), f"{j} never started"

    def open(self) -> IngestQueue:
        queue = open_backend(self.settings).queue(self.settings, self.handle)
        queue.start()
        self.queues.append(queue)
        return queue

    def unable_to_run(self) -> AbstractContextManager[None]:
        """Jobs submitted inside do not run before the queue stops (each backend its own way)."""
        raise NotImplementedError

    def close(self) -> None:
        self.release()
        for queue in self.queues:
            queue.stop(timeout=WAIT_S)


class ThreadBackend(Backend):
    @contextmanager
    def unable_to_run(self) -> Iterator[None]:
        """The store is down: the queue's thread tries each job and leaves it journaled for a restart."""
        self.down = True
        yield
        self.down = False


class ProcrastinateBackend(Backend):
    capacity = 2

    def __init__(self, folder: Path, url: str) -> None:
        super().__init__(Settings(index_dir=folder, store_url=url, queue="procrastinate", queue_lease_s=2.0))
        self.url = url
        self._worker: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Future[None] | None = None
        self.start_worker()

    def start_worker(self) -> None:
        ready = threading.Event()
        self._worker = threading.Thread(target=asyncio.run, args=(self._work(ready),), daemon=True)
        self._worker.start()
        assert ready.wait(WAIT_S), "the worker never started"

    async def _work(self, ready: threading.Event) -> None:
        app = worker_app(self.url, self.capacity)
        register_task(app, lambda j, attempt: self.handle(j), attempts=1)
        async with app.open_async():
            await ensure_schema_async(app, self.url)
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.ensure_future(app.run_worker_async(
                queues=[QUEUE], concurrency=self.capacity, wait=True, fetch_job_polling_interval=0.1,
                install_signal_handlers=False))
            ready.set()
            with contextlib.suppress(asyncio.CancelledError):  # the graceful stop: the running jobs finished
                await self._task

    def stop_worker(self) -> None:
        if self._worker is None:
            return
        assert self._loop is not None and self._task is not None
        self._loop.call_soon_threadsafe(self._task.cancel)  # what SIGTERM does to `citerag worker`
        self._worker.join(WAIT_S)
        assert not self._worker.is_alive(), "the worker did not stop"
        self._worker = None

    @contextmanager
    def unable_to_run(self) -> Iterator[None]:
        """No worker runs: jobs wait in the database, for the next worker."""
        self.stop_worker()
        yield
        self.start_worker()

    def close(self) -> None:
        self.release()  # the running jobs end, then the worker stops
        self.stop_worker()
        super().close()


@pytest.fixture(params=["thread", "procrastinate"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "thread":
        made: Backend = ThreadBackend(Settings(index_dir=tmp_path))  # its journal: tmp_path/jobs
    else:
        made = ProcrastinateBackend(tmp_path, request.getfixturevalue("pg_url"))
    yield made
    made.close()  # after a failed test too


def settled(queue: IngestQueue, *jobs: Job) -> bool:
    return queue.depth() == 0 and all(queue.state(j.collection, j.document_id) is None for j in jobs)


def fill(backend: Backend, queue: IngestQueue) -> list[Job]:
    """Every slot taken by a held job (documents 10, 11, ...), each reported running."""
    busy = [job(10 + i) for i in range(backend.capacity)]
    for j in busy:
        backend.hold(j)
        queue.submit(j)
    for j in busy:
        backend.running(j)
        wait_for(f"{j} reported running", lambda j=j: queue.state(j.collection, j.document_id) == "running")
    return busy


def test_a_submitted_job_runs_through_the_handler(backend: Backend) -> None:
    queue = backend.open()
    a = job(1)
    assert queue.state("default", 1) is None
    queue.submit(a)
    wait_for("the job ran", lambda: backend.ran == [a])
    wait_for("the queue settled", lambda: settled(queue, a))


def test_state_is_running_while_the_handler_runs_and_queued_while_waiting(backend: Backend) -> None:
    queue = backend.open()
    busy = fill(backend, queue)
    waiting, behind = job(1), job(10, "v2")  # one behind the slots, one behind its own document's running job
    queue.submit(waiting)
    queue.submit(behind)
    assert wait_for("the waiting job reported queued", lambda: queue.state("default", 1)) == "queued"
    assert queue.state("default", 10) == "running"  # a document with one running and one waiting job
    assert queue.state("default", 99) is None and queue.state("elsewhere", 1) is None
    assert wait_for("the depth", lambda: queue.depth() == 2)
    time.sleep(0.3)  # nothing moves while the slots are held
    assert (queue.state("default", 1), queue.depth()) == ("queued", 2)
    assert waiting not in backend.started
    backend.release()
    wait_for("every job ran", lambda: len(backend.ran) == len(busy) + 2)
    wait_for("the queue settled", lambda: settled(queue, *busy, waiting))


def test_cancel_drops_a_waiting_job(backend: Backend) -> None:
    queue = backend.open()
    busy = fill(backend, queue)
    doomed, kept = job(1), job(2)
    queue.submit(doomed)
    queue.submit(kept)
    queue.cancel("default", 1)
    backend.release()
    wait_for("the other jobs ran", lambda: kept in backend.ran and all(j in backend.ran for j in busy))
    wait_for("the queue settled", lambda: settled(queue, doomed, kept))
    assert doomed not in backend.started


def test_last_submitted_is_the_documents_latest_job(backend: Backend) -> None:
    queue = backend.open()
    first, second, other = job(1), job(1, "v2"), job(2)
    assert queue.last_submitted("default", 1) is None
    for j in (first, second, other):
        queue.submit(j)
    assert queue.last_submitted("default", 1) == second
    assert queue.last_submitted("default", 2) == other
    assert queue.last_submitted("default", 3) is None and queue.last_submitted("elsewhere", 1) is None
    wait_for("every job ran", lambda: len(backend.ran) == 3)
    assert queue.last_submitted("default", 1) == second  # still found once it has run (a retry's bytes)


def test_jobs_of_one_document_run_in_submission_order_and_never_at_once(backend: Backend) -> None:
    queue = backend.open()
    mine = [job(1, f"v{i}") for i in range(5)]
    theirs = [job(2, f"v{i}") for i in range(3)]
    for i, j in enumerate(mine):
        queue.submit(j)
        if i < len(theirs):
            queue.submit(theirs[i])
    wait_for("every job ran", lambda: len(backend.ran) == len(mine) + len(theirs))
    assert [j for j in backend.ran if j.document_id == 1] == mine
    assert [j for j in backend.ran if j.document_id == 2] == theirs
    assert backend.overlaps == []
    wait_for("the queue settled", lambda: settled(queue, mine[0], theirs[0]))


def test_jobs_not_run_before_a_stop_run_after_a_start(backend: Backend) -> None:
    """Jobs a queue could not run before it stopped (the thread queue: the store was down, its journal keeps them;
    procrastinate: no worker ran, the database keeps them) run once it starts again over the same storage."""
    first = backend.open()
    a, b = job(1), job(2)
    with backend.unable_to_run():
        first.submit(a)
        first.submit(b)
        wait_for("the jobs accepted", lambda: first.last_submitted("default", 2) == b)
        first.stop(timeout=WAIT_S)
        assert backend.ran == []
    again = backend.open()
    wait_for("the jobs ran after the restart", lambda: len(backend.ran) == 2)
    assert set(backend.ran) == {a, b}  # each once (two documents: either may finish first)
    wait_for("the queue settled", lambda: settled(again, a, b))
    again.stop(timeout=WAIT_S)
    backend.open()  # a third start finds nothing left to run
    time.sleep(0.5)
    assert len(backend.ran) == 2


def test_the_thread_queue_reports_each_outcome_and_outlives_a_failing_job(tmp_path: Path) -> None:
    """Only the thread queue sees outcomes in this process (procrastinate's are seen by the workers)."""
    from citerag.jobs.thread import ThreadQueue

    def run(j: Job) -> str | None:
        if j.document_id == 1:
            raise RuntimeError("a bug in one document's job")
        return None if j.document_id == 2 else f"outcome of {j.sha256}"

    queue, finished = ThreadQueue(run, tmp_path / "jobs"), list[tuple[str, Any]]()
    queue.on_finished = lambda name, outcome: finished.append((name, outcome))
    queue.start()
    for j in (job(1), job(2), job(3, collection="team")):
        queue.submit(j)
    wait_for("the last outcome", lambda: finished)
    queue.stop(timeout=WAIT_S)
    assert finished == [("team", "outcome of 3-v1")]  # none for the failure, none for nothing to do
    assert not list((tmp_path / "jobs").glob("*.json"))  # each job done: none left for a restart
