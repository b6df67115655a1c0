"""Sources synced into a collection: a folder, a Git repository or a website (citerag.sources), each document of
it kept as `source:NAME:KEY` with its bytes in the originals, as an upload's, so that a citation opens the copy
that was indexed and `retry` and `reindex` work on it unchanged.

A sync is one pass over the origin: what it says is unchanged is left alone (not even fetched, where the origin can
tell), new and changed bytes are indexed one document per transaction (the old version served until the new one
commits), and only after a pass that saw the whole origin are the documents it no longer holds removed. Documents
uploaded by hand, or of another source, are never touched: a sync reads and writes only its own records. Killed at any
point, a sync leaves every document whole (each is one transaction) and the next completes it: a record is written
after its document, so a lost record means a re-read, never a lost document. A lease in the store keeps two syncs of
one source from running at once on any machine; one held by a process of this host that is gone is taken over at once,
one of another host when it expires (LEASE_S without a renewal).
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from citerag.app import access
from citerag.app.collection import Collection
from citerag.errors import CiteragError
from citerag.ingest.files import Source
from citerag.sources import Failed, Fetched, Known, checked, open_upstream, rule_tags
from citerag.trace import detached
from citerag.types import SOURCE_SCHEME, SourceInfo, SourceItem

LEASE_S = 300.0  # a holder renews at least every RENEW_S; one silent for this long is taken to be gone
RENEW_S = 30.0
BACKOFF_S = (30.0, 3600.0)  # after a failed sync: the first wait, doubled per failure in a row, at most the second
COUNTS = ("added", "changed", "removed", "unchanged", "failed", "fetched")


class SourceBusy(CiteragError):
    """Another sync of the source is running (here or on another machine)."""


@dataclass
class SyncReport:
    source: str
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    failed: int = 0
    fetched: int = 0  # documents whose bytes were read from the origin (a changed token with the same bytes too)
    complete: bool = False  # the pass saw the whole origin (only then were documents removed)
    error: str | None = None  # why the sync as a whole failed (the origin unreachable)
    errors: list[str] = field(default_factory=list)  # documents that could not be read or indexed, with why

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def uri(name: str, key: str) -> str:
    return f"{SOURCE_SCHEME}{name}:{key}"


def _now() -> float:
    return time.time()


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def next_run(info: SourceInfo, after: float) -> float | None:
    """When the source is due next after a sync at `after` (None: only when asked)."""
    if info.cron:
        from croniter import croniter

        return float(croniter(info.cron, datetime.fromtimestamp(after, UTC)).get_next(float))
    return after + info.interval_s if info.interval_s else None


class OutsideRoots(CiteragError):
    """An API client named a folder (or file:// repository) outside the server's `source_roots`."""


def add(collection: Collection, info: SourceInfo, *, confined: bool = False) -> SourceInfo:
    """Add the source; `confined` (an API client's): its folder or file:// repository must lie under one of the
    settings' source_roots."""
    info = checked(info)
    local = info.location if info.kind == "folder" else \
        info.location[len("file://"):] if info.location.startswith("file://") else None
    if info.kind == "git" and local is None and "://" not in info.location and not info.location.startswith("git@"):
        local = info.location  # a bare path: git reads it as a local repository
    if local is not None:
        path = Path(local).resolve()
        if confined and not any(path.is_relative_to(Path(r).resolve()) for r in collection.settings.source_roots):
            raise OutsideRoots(f"location {info.location!r} is outside the server's source_roots "
                               f"({', '.join(map(str, collection.settings.source_roots)) or 'none set'})")
        if info.kind == "folder":
            info.location = str(path)
    info.status = {"next_run": next_run(info, _now())} if (info.interval_s or info.cron) else {}
    return collection.store.put_source(info, create=True)


def get(collection: Collection, name: str) -> SourceInfo:
    found = next((s for s in collection.store.sources() if s.name == name), None)
    if found is None:
        raise CiteragError(f"no source {name!r} in collection {collection.name!r}")
    return found


def workdir(collection: Collection, name: str) -> Path:  # the source's cache on this machine (a Git clone)
    return collection.settings.index_dir / "sources" / f"{collection.name}.{name}"


def remove(collection: Collection, name: str) -> int:
    """Remove the source and every document it holds (none other); how many documents went."""
    get(collection, name)
    holder = _lease(collection, name)
    try:
        items = collection.store.source_items(name)
        for item in items:
            _drop(collection, name, item)
        collection.store.remove_source(name)
        if items:
            collection.recalibrate(always=True)
    finally:
        collection.store.lease_source(name, holder, 0)
    shutil.rmtree(workdir(collection, name), ignore_errors=True)
    return len(items)


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def _gone(holder: str) -> bool:
    """Whether `holder` is a process (or a thread of this one) of this host that no longer runs: its lease need not
    be waited out."""
    host, _, rest = holder.partition(":")
    pid, _, thread = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return thread not in {str(t.ident) for t in threading.enumerate()}
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, another user's
        pass
    return False


def _lease(collection: Collection, name: str) -> str:
    me = _holder()
    other = collection.store.lease_source(name, me, LEASE_S)
    if other is not None and _gone(other):
        other = collection.store.lease_source(name, me, LEASE_S, take_from=other)
    if other is not None:
        raise SourceBusy(f"a sync of source {name!r} is running ({other})")
    return me


def _drop(collection: Collection, name: str, item: SourceItem) -> None:
    """The document goes (search, answers, files, caches: its rows and the generation change in one transaction),
    then its record, then its bytes unless another document has them."""
    doc = collection.document(item.document_id)
    if doc is not None:
        with collection.write_lock:
            collection.delete(doc.id)
        collection.forget_original(doc.sha256)
    collection.store.set_source_item(name, item.key, None)


def sync(collection: Collection, name: str) -> SyncReport:
    """One sync of the source now (SourceBusy while another runs). The origin unreachable is the report's
    `error`, recorded in the source's status with a backoff, not raised."""
    info = get(collection, name)
    holder = _lease(collection, name)
    report, started = SyncReport(name), _now()
    info.status = {**info.status, "last_attempt": started}
    collection.store.put_source(info)
    try:
        with detached():  # each document indexed is its own operation's trace, not the request's
            _pass(collection, info, holder, report)
    except CiteragError as exc:  # the origin Unreachable, or the store failing half way: what committed stays
        report.error = str(exc)
    finally:
        if report.added or report.changed or report.removed:  # the refusal rule refitted once, as after an ingest
            collection.recalibrate(always=True)
        _settle(collection, info, report, started)
        with suppress(CiteragError):  # the store is down or full: the lease lapses (a dead holder's is taken over)
            collection.store.lease_source(name, holder, 0)
    return report


def _pass(collection: Collection, info: SourceInfo, holder: str, report: SyncReport) -> None:
    name = info.name
    store = collection.store
    docs = {d.id: d for d in collection.documents()}
    records = {i.key: i for i in store.source_items(name)}

    def reader(doc_id: int) -> Any:
        return lambda: collection.read_original(docs[doc_id]) if doc_id in docs else None

    # A record whose document was deleted by hand is not known: the pass fetches it again.
    known = {k: Known(i.token, reader(i.document_id)) for k, i in records.items() if i.document_id in docs}
    upstream = open_upstream(info, workdir(collection, name))
    seen: set[str] = set()
    renewed = time.monotonic()
    for change in upstream.scan(known):
        if time.monotonic() - renewed > RENEW_S:
            store.lease_source(name, holder, LEASE_S)
            renewed = time.monotonic()
        seen.add(change.key)
        old = records.get(change.key)
        if isinstance(change, Failed):
            report.failed += 1
            report.errors.append(f"{change.key}: {change.error}")
        elif isinstance(change, Fetched):
            report.fetched += 1
            _index(collection, info, change, old if change.key in known else None, report)
        else:
            report.unchanged += 1
            if old is not None and old.token != change.token:
                store.set_source_item(name, change.key, SourceItem(change.key, change.token, old.document_id,
                                                                   old.link, old.origin))
    report.complete = upstream.complete
    if report.complete:
        for key in sorted(set(records) - seen):
            _drop(collection, name, records[key])
            report.removed += 1

    commit = getattr(upstream, "commit", None)  # a Git source's: what its documents were read at
    if commit:
        info.status["commit"] = commit


def _index(collection: Collection, info: SourceInfo, change: Fetched, old: SourceItem | None,
           report: SyncReport) -> None:
    name, sha = info.name, collection.save_original(change.data)  # saved first: a citation always finds it
    before = collection.document(old.document_id) if old else None
    if (groups := rule_tags(info.options, change.key, "groups")) is not None:  # before its text is searchable
        access.restrict_first(collection, uri(name, change.key), change.name, sha, groups)
    with collection.write_lock:
        outcome = collection.index_document(Source(uri(name, change.key), change.data, name=change.name),
                                            refit=False)
    collection.store.set_source_item(name, change.key, SourceItem(change.key, change.token, outcome.document_id,
                                                                  change.link, change.origin))
    tags, now = rule_tags(info.options, change.key), collection.document(outcome.document_id)
    if tags is not None and now is not None and now.tags != tags:  # the source's rules decide, as for its text
        collection.store.set_tags(outcome.document_id, tags)
    if outcome.status == "failed":
        report.failed += 1
        report.errors.append(f"{change.key}: {outcome.error}")
    elif outcome.status == "unchanged":
        report.unchanged += 1
    elif before is None:
        report.added += 1
    else:
        report.changed += 1
    if before is not None and before.sha256 != sha:
        collection.forget_original(before.sha256)


def _settle(collection: Collection, info: SourceInfo, report: SyncReport, started: float) -> None:
    status = dict(info.status)
    status["last"] = {k: getattr(report, k) for k in COUNTS}
    status["complete"] = report.complete
    status["documents"] = len(collection.store.source_items(info.name))
    status["by"] = _holder()  # which process (and thread) ran it: host:pid:thread
    if report.error is None:
        status.update(last_success=started, last_error=None, failures=0, next_run=next_run(info, started))
    else:
        failures = int(status.get("failures", 0)) + 1
        wait = min(BACKOFF_S[0] * 2 ** (failures - 1), BACKOFF_S[1])
        status.update(last_error=report.error, failures=failures, next_run=_now() + wait)
    info.status = status
    with suppress(CiteragError):  # removed while it synced, or the store is down: the report still says what happened
        collection.store.put_source(info)


def due(collection: Collection, now: float | None = None) -> list[str]:  # the sources whose next run has come
    at = _now() if now is None else now
    return [s.name for s in collection.store.sources() if s.status.get("next_run") is not None
            and float(s.status["next_run"]) <= at]


def view(info: SourceInfo) -> dict[str, Any]:
    """The source as the CLI and the API show it (times as ISO 8601)."""
    s = info.status
    return {"name": info.name, "kind": info.kind, "location": info.location, "options": info.options,
            "interval_s": info.interval_s, "cron": info.cron, "created_at": info.created_at,
            "last_attempt": _iso(s.get("last_attempt")), "last_success": _iso(s.get("last_success")),
            "next_run": _iso(s.get("next_run")), "last_error": s.get("last_error"),
            "failures": s.get("failures", 0), "last": s.get("last", {}), "complete": s.get("complete"),
            "documents": s.get("documents", 0), "commit": s.get("commit"), "by": s.get("by")}
