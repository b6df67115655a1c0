"""The audit trail's data and rules, shared by both backends (citerag.audit.sqlite, citerag.audit.postgres): an
`AuditEvent` (who did what, when, in which collection, under which trace, to which documents), the `AuditLog`
protocol, the query's checks (`AuditQuery`), and `Recorder`, the part of a log that makes `record` safe to call
on a request's path: it never raises (a failure is logged and the event dropped) and it sweeps the events older
than the retention at most once an hour.

Times are ISO 8601 in UTC to the second, `2025-05-01T12:00:00Z`: fixed width, so that they sort as text.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from citerag.errors import CiteragError, first_line
from citerag.settings import COLLECTION_NAME

log = logging.getLogger("citerag.audit")

# What an event says was done. Reads: a search, an answer, a conversation's turn (the page's, the MCP tools' or
# the OpenAI-compatible endpoint's: "chat"), a document opened (its text, file, view or metadata). Changes: a
# document uploaded, deleted, its groups (who may read it) or tags set; keys, users and browser sessions;
# collections made and removed.
ACTIONS = ("search", "ask", "conversation", "chat",
           "document.read", "document.upload", "document.delete", "document.groups", "document.tags",
           "key.create", "key.revoke",
           "user.create", "user.update", "user.remove",
           "session.start", "session.end",
           "collection.create", "collection.delete")
# A query's `action` may also name a family: "document" is every document.* action.
FAMILIES = tuple(sorted({a.partition(".")[0] for a in ACTIONS if "." in a}))
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
MAX_LIMIT = 10_000  # events one query returns at most
MAX_PRINCIPAL = 200
MAX_DOCUMENT = 2**63 - 1  # a document id is a 64-bit integer in both stores
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SWEEP_EVERY_S = 3600.0  # a log sweeps on its first record, then at most this often
WARN_EVERY_S = 60.0  # a log that cannot write says so at most this often (with the count dropped meanwhile)


@dataclass(frozen=True)
class AuditEvent:
    at: str  # when, ISO 8601 UTC to the second (TIME_FORMAT)
    principal: str  # who: "key:PREFIX", "user:NAME" or "local" (keystore.base.Principal.who)
    action: str  # one of ACTIONS
    collection: str | None = None  # None: the server's (a server admin key made or revoked)
    trace_id: str | None = None  # the request's X-Trace-Id
    documents: tuple[int, ...] = ()  # the ids returned or opened, in the collection
    # What else the caller chose to say: {"groups": [...]}, {"status": 200}, {"question": ...} (the question only
    # where the collection keeps trace text: the caller decides, the log keeps what it is given).
    detail: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"at": self.at, "principal": self.principal, "action": self.action, "collection": self.collection,
                "trace_id": self.trace_id, "documents": list(self.documents), "detail": self.detail}


def now() -> str:
    """This second, as an event's `at`."""
    return format_time(datetime.now(UTC))


def format_time(value: datetime) -> str:
    """An aware datetime as an event's `at` (TIME_FORMAT, the year always four digits, as strftime's is not)."""
    return value.astimezone(UTC).replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def event(principal: str, action: str, collection: str | None = None, trace_id: str | None = None,
          documents: Iterable[int] = (), **detail: Any) -> AuditEvent:
    """An event stamped now. An action not in ACTIONS is a ValueError (a typo at a call site, found by its test)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r} (expected one of {', '.join(ACTIONS)})")
    return AuditEvent(now(), principal, action, collection, trace_id, tuple(int(d) for d in documents), detail)


def parse_time(value: str | datetime) -> str:
    """An ISO 8601 date or time as an event's `at` (UTC, to the second); without an offset it is UTC. A ValueError
    that says what is expected otherwise."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 time (e.g. 2025-05-01 or 2025-05-01T12:00:00Z)") \
                from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return format_time(value)
    except OverflowError:  # 0001-01-01T00:00:00+01:00: before the first representable time
        raise ValueError(f"{value.isoformat()} is out of range") from None


def as_datetime(at: str) -> datetime:
    """An event's `at` as an aware datetime."""
    return datetime.fromisoformat(at)


def cutoff(retention_days: float) -> str:
    """The `at` before which a sweep removes events."""
    return format_time(datetime.now(UTC) - timedelta(days=retention_days))


def dump_detail(detail: dict[str, Any]) -> str:
    """The detail as JSON text; a value JSON has no type for is kept as its str()."""
    return json.dumps(detail, ensure_ascii=False, default=str, sort_keys=True)


class AuditQueryError(CiteragError):
    """A query's bad value: `field` names the filter (collection, principal, action, document, since, until,
    limit), `reason` says what is expected."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


@dataclass(frozen=True)
class AuditQuery:
    """A query's filters, checked (`parse`); since and until in TIME_FORMAT, the events kept: since <= at < until."""

    collection: str | None = None
    principal: str | None = None
    action: str | None = None
    since: str | None = None
    until: str | None = None
    document: int | None = None
    limit: int = 100

    def where(self, ph: str, document_clause: str, at: Callable[[str], Any] = str) -> tuple[str, list[Any]]:
        """The filters as a backend's WHERE clause and its arguments: `ph` its placeholder, `document_clause` its test
        that an event's documents hold one id (with one placeholder), `at` a time as the backend compares it."""
        clauses: list[str] = []
        args: list[Any] = []
        for column, value in (("collection", self.collection), ("principal", self.principal)):
            if value is not None:
                clauses.append(f"{column} = {ph}")
                args.append(value)
        if self.action is not None:  # the action, or its family's ("document" is every document.*)
            clauses.append(f"(action = {ph} OR action LIKE {ph})")
            args += [self.action, f"{self.action}.%"]
        for bound, op in ((self.since, ">="), (self.until, "<")):
            if bound is not None:
                clauses.append(f"at {op} {ph}")
                args.append(at(bound))
        if self.document is not None:
            clauses.append(document_clause)
            args.append(self.document)
        return (" WHERE " + " AND ".join(clauses) if clauses else ""), args

    @classmethod
    def parse(cls, *, collection: str | None = None, principal: str | None = None, action: str | None = None,
              since: str | datetime | None = None, until: str | datetime | None = None,
              document: int | None = None, limit: int = 100) -> AuditQuery:
        if collection is not None and not re.match(COLLECTION_NAME, collection):
            raise AuditQueryError("collection", f"{collection!r} is not a collection name")
        if principal is not None and (not 0 < len(principal) <= MAX_PRINCIPAL or _CONTROL.search(principal)):
            raise AuditQueryError("principal", f"expected 1-{MAX_PRINCIPAL} printable characters (e.g. "
                                               "key:ab12cd34, user:alice, local)")
        if action is not None and action not in ACTIONS and action not in FAMILIES:
            raise AuditQueryError("action", f"{action!r} is not an action: expected one of "
                                            f"{', '.join(ACTIONS + FAMILIES)}")
        if document is not None and (isinstance(document, bool) or not isinstance(document, int)
                                     or not 1 <= document <= MAX_DOCUMENT):
            raise AuditQueryError("document", f"{document!r} is not a document id (a whole number from 1)")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise AuditQueryError("limit", f"expected a whole number from 1 to {MAX_LIMIT}, not {limit!r}")
        times = {}
        for name, value in (("since", since), ("until", until)):
            try:
                times[name] = None if value is None else parse_time(value)
            except ValueError as exc:
                raise AuditQueryError(name, str(exc)) from None
        if times["since"] is not None and times["until"] is not None and times["since"] > times["until"]:
            raise AuditQueryError("until", f"until ({times['until']}) is before since ({times['since']})")
        return cls(collection, principal, action, times["since"], times["until"], document, limit)


class AuditLog(Protocol):
    """The home's audit trail: every collection's events and the server's own, in one place."""

    retention_days: float  # events older than this many days are swept; 0: the trail is off (NoAudit)

    def record(self, event: AuditEvent) -> None:
        """Keep one event, now (a small write). Never raises: a failure is logged and the event dropped, so that
        the request it describes goes on."""
        ...

    def query(self, *, collection: str | None = None, principal: str | None = None, action: str | None = None,
              since: str | datetime | None = None, until: str | datetime | None = None,
              document: int | None = None, limit: int = 100) -> list[AuditEvent]:
        """The newest `limit` events that match every filter given, newest first: since <= at < until (ISO 8601;
        UTC without an offset); `action` an action or a family ("document"); `document` an id the event names.
        A bad value is an AuditQueryError naming the filter; a store that cannot be read, StoreUnavailable."""
        ...

    def sweep(self, retention_days: float) -> int:
        """Remove the events older than `retention_days`; how many went. `record` calls it at most hourly."""
        ...

    def close(self) -> None: ...


class NoAudit:
    """The trail of a home with audit_retention_days = 0: nothing kept, nothing found."""

    retention_days = 0.0

    def record(self, event: AuditEvent) -> None:
        pass

    def query(self, *, collection: str | None = None, principal: str | None = None, action: str | None = None,
              since: str | datetime | None = None, until: str | datetime | None = None,
              document: int | None = None, limit: int = 100) -> list[AuditEvent]:
        AuditQuery.parse(collection=collection, principal=principal, action=action, since=since, until=until,
                         document=document, limit=limit)  # the same refusals as a trail that keeps events
        return []

    def sweep(self, retention_days: float) -> int:
        return 0

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Row:
    """An event as a backend writes it: its time checked, its documents whole numbers, its detail JSON text."""

    at: str
    principal: str
    action: str
    collection: str | None
    trace_id: str | None
    documents: list[int]
    detail: str

    @classmethod
    def of(cls, e: AuditEvent) -> Row:
        return cls(parse_time(e.at), str(e.principal), str(e.action), e.collection, e.trace_id,
                   [int(d) for d in e.documents], dump_detail(dict(e.detail)))


class Recorder:
    """`record` for a backend that implements `_insert(row)` and `sweep`: the event checked, the hourly sweep,
    and every failure logged (once a minute at most) and dropped instead of raised."""

    def __init__(self, retention_days: float, where: str) -> None:
        self.retention_days = retention_days
        self.where = where  # what the log's messages name: a file, or a URL without its password
        self.dropped = 0  # events that could not be kept, since this object was made
        self._lock = threading.Lock()
        self._sweep_due = 0.0  # time.monotonic(): the first record sweeps
        self._warn_due = 0.0
        self._unreported = 0

    def _insert(self, row: Row) -> None:
        raise NotImplementedError

    def sweep(self, retention_days: float) -> int:
        raise NotImplementedError

    def record(self, event: AuditEvent) -> None:
        try:
            row = Row.of(event)
        except Exception as exc:  # a malformed event is dropped: the request goes on
            self._drop(event, exc)
            return
        if self._sweep_now():
            try:
                self.sweep(self.retention_days)
            except Exception as exc:
                log.warning("could not sweep the audit trail in %s: %s", self.where, first_line(exc))
        try:
            self._insert(row)
        except Exception as exc:
            self._drop(event, exc)

    def _sweep_now(self) -> bool:
        clock = time.monotonic()
        with self._lock:
            if clock < self._sweep_due:
                return False
            self._sweep_due = clock + SWEEP_EVERY_S
            return True

    def _drop(self, event: AuditEvent, exc: Exception) -> None:
        clock = time.monotonic()
        with self._lock:
            self.dropped += 1
            self._unreported += 1
            if clock < self._warn_due:
                return
            self._warn_due, count, self._unreported = clock + WARN_EVERY_S, self._unreported, 0
        log.warning("audit event%s dropped (the last: %s by %s): cannot write to %s: %s",
                    f"s ({count})" if count > 1 else "", getattr(event, "action", "?"),
                    getattr(event, "principal", "?"), self.where, first_line(exc))
