"""The sources' scheduler in a long-running process (the API server; every `citerag worker` too): one background thread
that finds each source's sync when it is due, and the syncs people ask for, and has them run: on the ingestion
queue's workers where the queue runs syncs (procrastinate: any worker takes them, one per source at a time), else
here, one at a time.

Any number of processes may run one over the same store: a source's lease (citerag.app.sources) lets exactly one
sync run per source, and a deferred sync is not deferred again until it ran (or ten minutes passed). A watched
folder source is looked at every tick: its files' names, sizes and times are compared with the last look, so a
change is synced within seconds without reading a byte of an unchanged folder. A failing source waits out its
backoff and never holds up the others (its error is its own status); a source whose origin hangs holds this thread
up to its timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from citerag.app import sources
from citerag.app.home import Citerag
from citerag.errors import CiteragError
from citerag.jobs import IngestQueue
from citerag.sources.folder import fingerprint
from citerag.types import SourceInfo

log = logging.getLogger("citerag.sources")


class Syncer:
    def __init__(self, app: Citerag, queue: IngestQueue | None = None, tick_s: float = 1.0,
                 on_synced: Callable[[str, sources.SyncReport], None] | None = None) -> None:
        self.app = app
        self.queue = queue
        self._deferred: dict[tuple[str, str], float] = {}  # syncs handed to the queue, and when
        self.tick_s = tick_s
        self.on_synced = on_synced  # each finished sync's collection and report (metrics)
        self._asked: list[tuple[str, str]] = []
        self._looked: dict[tuple[str, str], str] = {}  # a watched folder's fingerprint at the last look
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="citerag-sources", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def ask(self, collection: str, name: str) -> None:
        """Sync the source soon (after the one running, if any)."""
        self._asked.append((collection, name))
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._round()
            except Exception:  # a round that failed (the store down) is tried again next tick
                log.exception("sources: a scheduling round failed")
            self._wake.wait(self.tick_s)
            self._wake.clear()

    def _round(self) -> None:
        todo = list(dict.fromkeys(self._asked))
        del self._asked[:len(todo)]
        now = time.time()
        for name in self.app.collection_names():
            try:
                collection = self.app.collection(name)
            except CiteragError:
                continue  # deleted meanwhile
            found = collection.store.sources()
            todo += [(name, s) for s in sources.due(collection, now) if not self._waiting(name, s, found, now)]
            for info in found:
                if info.kind == "folder" and info.options.get("watch"):
                    seen = fingerprint(info.location)
                    if self._looked.setdefault((name, info.name), seen) != seen:
                        self._looked[(name, info.name)] = seen
                        todo.append((name, info.name))
        for collection_name, source in dict.fromkeys(todo):
            if self._stop.is_set():
                return
            self._sync(collection_name, source)

    def _waiting(self, collection: str, source: str, found: list[SourceInfo], now: float) -> bool:
        """A sync handed to the queue that has not run yet (asked again only after ten minutes)."""
        at = self._deferred.get((collection, source))
        info = next((s for s in found if s.name == source), None)
        if at is None or info is None or float(info.status.get("last_attempt") or 0) >= at or now - at > 600:
            self._deferred.pop((collection, source), None)
            return False
        return True

    def _sync(self, collection_name: str, source: str) -> None:
        if self.queue is not None:
            try:
                if self.queue.submit_sync(collection_name, source):
                    self._deferred[(collection_name, source)] = time.time()
                    return
            except CiteragError as exc:  # the queue's database is down: tried again next tick
                log.warning("source %s of %s: not queued: %s", source, collection_name, exc)
                return
        try:
            report = sources.sync(self.app.collection(collection_name), source)
        except sources.SourceBusy:
            return  # another process (or an earlier ask) is syncing it
        except CiteragError as exc:  # removed meanwhile, or the store is down
            log.warning("source %s of %s: %s", source, collection_name, exc)
            return
        if report.error:
            log.warning("source %s of %s: %s", source, collection_name, report.error)
        if self.on_synced is not None:
            self.on_synced(collection_name, report)
