"""HNSW graphs built off the write path: a save that finds the graph due for a rebuild stages a build here, which
starts once that save's manifest is written, and returns; the finished graph is adopted by a later save
(HnswIndex.save), under the writers' lock.

A build works from a snapshot taken at that save: the graph file it extends (written once, never changed), the
ids to drop from it, and the rows to add, read from the exact index's saved vectors file (rows below the saved
count never change under a name). It runs in a child process, which a daemon thread waits for: at 1M vectors
usearch holds the GIL while it loads a graph (1.0 s) and writes one (1.1 s), measured, though not while it adds,
so in a thread those would stall every search and save of the process. At most one build runs per index
directory per process. Builds of at most SYNC_BUILD_ROWS vectors run inside the save instead (`run`).

Its files are named BUILD_PREFIX + pid: `sync._remove_unnamed` leaves them alone while that process lives
(`stale`), so a build in progress or waiting to be adopted is not deleted by another process's save; a killed
process's leftovers go at the next save after it died. Until adoption readers keep the old graph and the exact
delta, so results stay exact whatever the build's state.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from citerag.index import hnsw_graph
from citerag.index.files import fsync_path, load_arrays, new_name

log = logging.getLogger(__name__)

BUILD_PREFIX = "hnsw-build-"
# A build inserting up to this many vectors runs inside the save instead: measured here (two shared cores),
# inserting 10,000 384-d vectors on one thread took 3.3 s, so 1,000 take about 0.35 s, and restoring and writing the
# graph such a delta is due for (up to 20,000 vectors) about 0.1 s more. Small collections, and the tests on
# them, keep getting their graph at once.
SYNC_BUILD_ROWS = 1_000
ADD_BATCH = 8_192  # vectors per usearch add call: a cancelled build stops within one batch
# The child's priority: its threads take every idle core and give way to the process that serves. Measured at 1M
# on two shared cores: at priority 0, searches during the build 197 ms p50 and the slowest save 0.64 s; at 10,
# 107 ms (104 just before the build) and 0.22 s.
BUILD_NICE = 10
STALE_AFTER_S = 86_400.0  # a build file this old is removed even if a process of its pid runs (pid reused)

PENDING, RUNNING, DONE, FAILED, CANCELLED = "pending", "running", "done", "failed", "cancelled"

# Tests clear it to hold background builds, their file written, before they count as ended.
release = threading.Event()
release.set()


@dataclass(eq=False)
class GraphBuild:
    """A graph holding `ids` (sorted), each with the vector of its exact row `rows[i]` at the snapshot."""

    directory: Path
    dim: int
    started_on: str | None  # the index's graph file at the snapshot: the result is adopted only on top of it
    base_file: str | None  # the graph extended, None for a new one
    remove_keys: np.ndarray  # ids to drop from the base graph (removed since it was built)
    add_rows: np.ndarray  # rows of `vectors` to insert
    add_ids: np.ndarray
    vectors: np.ndarray  # the exact index's saved vectors (memory-mapped)
    exact_file: str | None  # that file's name: row numbers mean the same only in it
    ids: np.ndarray
    rows: np.ndarray
    key: str = field(default_factory=lambda: new_name(f"{BUILD_PREFIX}{os.getpid()}"))  # every file it writes
    name: str = ""  # its graph file, key + ".usearch"; renamed as any graph's when adopted (HnswIndex._adopt)
    state: str = PENDING
    error: BaseException | None = None
    seconds: float = 0.0
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    listeners: list[Callable[[GraphBuild], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.name or f"{self.key}.usearch"

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    def wait(self, timeout: float | None = None) -> bool:
        """True once the build has ended and its listeners have run."""
        return self.done.wait(timeout)

    def discard(self) -> None:
        """Remove its file (not adopted: no manifest names it)."""
        (self.directory / self.name).unlink(missing_ok=True)


_lock = threading.Lock()
_builds: dict[Path, GraphBuild] = {}  # by resolved directory: staged, running, or ended and not yet adopted
_threads: dict[GraphBuild, threading.Thread] = {}


def _key(directory: Path) -> Path:
    return directory.resolve()


def current(directory: Path) -> GraphBuild | None:
    """This process's build for the directory: running, or ended and not yet taken (`take`). One staged but never
    launched (its save failed) does not count: the next save stages another."""
    with _lock:
        build = _builds.get(_key(directory))
        return None if build is None or build.state == PENDING else build


def take(build: GraphBuild) -> None:
    """Forget an ended build (adopted or dropped): the directory may get a new one."""
    with _lock:
        if _builds.get(_key(build.directory)) is build:
            del _builds[_key(build.directory)]


def when_done(directory: Path, listener: Callable[[GraphBuild], None]) -> bool:
    """Call `listener(build)` from the build's thread when the running build ends; False if none is running."""
    with _lock:
        build = _builds.get(_key(directory))
        if build is None or not build.running:
            return False
        if listener not in build.listeners:
            build.listeners.append(listener)
        return True


def _build(directory: Path, dim: int, base_file: str | None, remove_keys: np.ndarray, add_ids: np.ndarray,
           add_rows: np.ndarray, vectors: np.ndarray, out: str, cancelled: Callable[[], bool]) -> None:
    """Write the graph to `directory/out` and fsync it (the base graph extended, or a new one); raises on failure."""
    graph = hnsw_graph.new_graph(dim)
    if base_file is not None:
        graph.load(str(directory / base_file))  # an extendable copy
        graph.expansion_add = hnsw_graph.EXPANSION_ADD  # the file does not keep it
        if len(remove_keys):
            graph.remove(remove_keys)
    # usearch's parallel insertion leaves a few nodes unreachable (measured: 2-3 of 600 random vectors, 1 in
    # 5,000 at 20k); one thread builds small batches exactly, and large ones are where threads pay off.
    threads = 0 if len(add_rows) >= hnsw_graph.PARALLEL_ADD_ROWS else 1
    for start in range(0, len(add_rows), ADD_BATCH):
        if cancelled():
            raise InterruptedError("graph build cancelled")
        part = add_rows[start:start + ADD_BATCH]
        graph.add(add_ids[start:start + ADD_BATCH], np.ascontiguousarray(vectors[part]), threads=threads)
    hnsw_graph.save_graph(graph, directory / out)
    fsync_path(directory / out)


def run(build: GraphBuild) -> None:
    """Build in this thread (a small graph, inside a save); the outcome is in `build.state`."""
    t = time.perf_counter()
    try:
        _build(build.directory, build.dim, build.base_file, build.remove_keys, build.add_ids, build.add_rows,
               build.vectors, build.name, build.cancel.is_set)
        build.state = DONE
    except BaseException as exc:  # noqa: BLE001 - reported through the build: the caller raises it
        build.state, build.error = FAILED, exc
        build.discard()
    build.seconds = time.perf_counter() - t


def _in_child(build: GraphBuild) -> None:
    """Build in a child process (`python -m citerag.index.hnsw_build`), waiting for it. The snapshot's arrays go
    to a file; the vectors file and the base graph are hard-linked under the build's name first, so that a save
    that no longer names them (a compaction, another process's graph) cannot remove them before the child opens
    them. Every such file is the build's (BUILD_PREFIX, this pid), removed here, or by a save once we are gone."""
    directory, stem = build.directory, build.key
    temporary: list[Path] = []

    def linked(name: str, suffix: str) -> str:
        try:
            os.link(directory / name, directory / f"{stem}{suffix}")
        except OSError:  # no hard links here: the file itself (a removal meanwhile fails the build; retried)
            return name
        temporary.append(directory / f"{stem}{suffix}")
        return f"{stem}{suffix}"

    try:
        temporary.append(directory / f"{stem}.npz")
        with open(temporary[0], "wb") as f:
            np.savez(f, remove_keys=build.remove_keys, add_ids=build.add_ids, add_rows=build.add_rows)
        vectors = linked(build.exact_file, ".f32") if build.exact_file is not None and len(build.vectors) else ""
        base = linked(build.base_file, ".base") if build.base_file is not None else ""
        command = [sys.executable, "-m", "citerag.index.hnsw_build", str(directory), build.name, temporary[0].name,
                   vectors, str(len(build.vectors)), str(build.dim), base, str(os.getpid())]
        with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) as child:
            while True:
                try:
                    _, errors = child.communicate(timeout=0.5)
                    break
                except subprocess.TimeoutExpired:
                    if build.cancel.is_set():
                        child.kill()
        if build.cancel.is_set():
            raise InterruptedError("graph build cancelled")
        if child.returncode:
            raise RuntimeError(f"graph build exited {child.returncode}: {errors.strip()[-2000:]}")
    finally:
        for path in temporary:
            path.unlink(missing_ok=True)


def _background(build: GraphBuild) -> None:
    t = time.perf_counter()
    error: BaseException | None = None
    try:
        _in_child(build)
    except BaseException as exc:  # noqa: BLE001 - the thread's end: reported through the build, never lost
        error = exc
    build.seconds = time.perf_counter() - t
    release.wait()
    if error is None and not build.cancel.is_set():
        build.state = DONE
    else:
        build.state, build.error = (CANCELLED if build.cancel.is_set() else FAILED), error
        build.discard()
    if build.state == FAILED:
        log.warning("HNSW graph build in %s failed (%s): the exact delta keeps serving; the next save retries",
                    build.directory, build.error)
    with _lock:
        listeners = list(build.listeners)
    for listener in listeners:
        try:
            listener(build)
        except Exception:  # a listener's failure must not hide the build from the others
            log.exception("after the HNSW graph build in %s", build.directory)
    build.done.set()
    with _lock:
        _threads.pop(build, None)


def stage(build: GraphBuild) -> None:
    """Register the build to run once the manifest of its snapshot is written (`launch`), replacing one staged by
    a save that failed. Not before: the rows it reads lie past the vectors file's previous saved count, and a
    writer that took over from the previous manifest would truncate them (a fault in the build, not an error)."""
    with _lock:
        staged = _builds.get(_key(build.directory))
        if staged is not None and staged.state != PENDING:
            raise RuntimeError(f"a graph build for {build.directory} exists already")
        _builds[_key(build.directory)] = build


def launch(directory: Path) -> None:
    """Start the directory's staged build, if any, in a daemon thread (its manifest is now in place)."""
    with _lock:
        build = _builds.get(_key(directory))
        if build is None or build.state != PENDING:
            return
        build.state = RUNNING
        thread = threading.Thread(target=_background, args=(build,), name=f"hnsw-build {directory.name}", daemon=True)
        _threads[build] = thread
        thread.start()


def stale(path: Path) -> bool:
    """Whether a build file may be deleted: its process has ended, or (this process) it is no build of ours."""
    try:
        pid = int(path.name[len(BUILD_PREFIX):].split("-", 1)[0])
        age = time.time() - path.stat().st_mtime
    except (ValueError, OSError):
        return True
    if age > STALE_AFTER_S:
        return True
    if pid == os.getpid():
        with _lock:
            return not any(path.name.startswith(b.key) for b in _builds.values())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: it runs, as someone else
        return False
    return False


@atexit.register
def _cancel_at_exit() -> None:
    # A process exiting without Collection.close (which waits for a build and adopts it): kill its children
    # rather than leave them building for nobody (each also stops once it sees its parent gone). The graph is
    # lost; the next save, in any process, starts another.
    with _lock:
        pending = list(_threads.items())
    for build, _thread in pending:
        build.cancel.set()
    for _build, thread in pending:
        thread.join(timeout=60)


def _main(argv: list[str]) -> None:
    """The child of `_in_child`: DIRECTORY OUT SNAPSHOT VECTORS COUNT DIM BASE PARENT_PID. It stops if its parent
    dies (a killed process's build is started again by the next save anyway)."""
    directory, out, snapshot, vectors_name, count, dim, base, parent = argv
    with suppress(OSError, AttributeError):  # no nice() on Windows
        os.nice(BUILD_NICE)
    arrays = load_arrays(Path(directory) / snapshot)
    shape = (int(count), int(dim))
    vectors = np.memmap(Path(directory) / vectors_name, dtype=np.float32, mode="r", shape=shape) if shape[0] \
        else np.zeros(shape, dtype=np.float32)
    try:
        _build(Path(directory), int(dim), base or None, arrays["remove_keys"], arrays["add_ids"], arrays["add_rows"],
               vectors, out, lambda: os.getppid() != int(parent))
    except BaseException:
        (Path(directory) / out).unlink(missing_ok=True)
        raise


if __name__ == "__main__":
    _main(sys.argv[1:])
