"""What every audit trail backend must do, as one test class each backend's test class subclasses.

    class TestSqliteAudit(AuditContract):
        @pytest.fixture()
        def make(self, tmp_path): ...      # make(retention_days=90) -> AuditLog, as the backend bundle opens it
        @pytest.fixture(params=[...])
        def broken(self, ...): ...         # an AuditLog whose database cannot be written

`make` called twice opens the same trail through a new object, as another process would. (Named audit_contract,
not contract: tests/store has a `contract` module, and both directories are on sys.path in one run.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from citerag.audit.base import AuditEvent, AuditLog, AuditQueryError, event, parse_time
from citerag.errors import StoreUnavailable

MakeLog = Callable[..., AuditLog]
QUESTION = "Who may read the payroll runbook? — ünïcode and \"quotes\""


def ago(days: float = 0.0, seconds: float = 0.0) -> str:
    return parse_time(datetime.now(UTC) - timedelta(days=days, seconds=seconds))


def at(e: AuditEvent, when: str) -> AuditEvent:
    return AuditEvent(when, e.principal, e.action, e.collection, e.trace_id, e.documents, e.detail)


def seeded(audit: AuditLog) -> list[AuditEvent]:
    """Six events over three days, recorded oldest first; returned newest first, as a query answers."""
    events = [
        at(event("key:aaaa1111", "search", "default", "a" * 32, [3, 7], status=200), "2025-05-01T09:00:00Z"),
        at(event("user:alice", "document.read", "default", "b" * 32, [7], view="text"), "2025-05-01T10:00:00Z"),
        at(event("user:alice", "ask", "hr", "c" * 32, [12], question=QUESTION), "2025-05-02T09:00:00Z"),
        at(event("key:admin000", "document.groups", "hr", None, [12], groups=["hr", "sre"]), "2025-05-02T12:30:00Z"),
        at(event("key:admin000", "key.create", None, None, (), prefix="bbbb2222", scope="read"),
           "2025-05-03T08:00:00Z"),
        at(event("local", "document.delete", "default", "d" * 32, [3]), "2025-05-03T08:00:00Z"),  # same second
    ]
    for e in events:
        audit.record(e)
    return events[::-1]


class AuditContract:
    @pytest.fixture()
    def make(self) -> MakeLog:
        raise NotImplementedError("a backend's test class provides make(retention_days=90) -> AuditLog")

    @pytest.fixture()
    def broken(self) -> AuditLog:
        raise NotImplementedError("a backend's test class provides an AuditLog it cannot write")

    def test_a_new_trail_is_empty(self, make: MakeLog) -> None:
        assert make().query() == []

    def test_an_event_reads_back_as_recorded_from_another_process(self, make: MakeLog) -> None:
        recorded = event("user:alice", "ask", "hr", "c" * 32, [12, 5], question=QUESTION,
                         groups=["hr"], nested={"k": [1, 2.5, None, True]})
        make().record(recorded)
        found = make().query()
        assert found == [recorded]
        assert found[0].documents == (12, 5) and found[0].detail["question"] == QUESTION
        assert found[0].as_json() == {"at": recorded.at, "principal": "user:alice", "action": "ask",
                                      "collection": "hr", "trace_id": "c" * 32, "documents": [12, 5],
                                      "detail": {"question": QUESTION, "groups": ["hr"],
                                                 "nested": {"k": [1, 2.5, None, True]}}}

    def test_times_are_kept_in_utc_to_the_second(self, make: MakeLog) -> None:
        audit = make()
        audit.record(at(event("local", "search"), "2025-05-01T14:00:00.750+02:00"))
        audit.record(at(event("local", "ask"), "2025-05-01T13:00:00"))  # no offset: UTC
        assert [e.at for e in audit.query()] == ["2025-05-01T13:00:00Z", "2025-05-01T12:00:00Z"]

    def test_newest_first_and_the_limit(self, make: MakeLog) -> None:
        audit = make()
        newest_first = seeded(audit)
        assert make().query() == newest_first  # one second's events: the later recorded first
        assert audit.query(limit=2) == newest_first[:2]
        assert audit.query(limit=1) == [newest_first[0]]

    def test_each_filter_and_their_conjunction(self, make: MakeLog) -> None:
        audit = make()
        e = seeded(audit)  # e[0] newest ... e[5] oldest
        assert audit.query(collection="default") == [e[0], e[4], e[5]]
        assert audit.query(collection="hr") == [e[2], e[3]]
        assert audit.query(collection="nowhere") == []
        assert audit.query(principal="key:admin000") == [e[1], e[2]]
        assert audit.query(principal="user:alice") == [e[3], e[4]]
        assert audit.query(action="ask") == [e[3]]
        assert audit.query(action="document") == [e[0], e[2], e[4]]  # the family: every document.*
        assert audit.query(action="key.create") == [e[1]]
        assert audit.query(action="key") == [e[1]]
        assert audit.query(action="session") == []
        assert audit.query(document=7) == [e[4], e[5]]
        assert audit.query(document=12) == [e[2], e[3]]
        assert audit.query(document=1) == []  # not 12's digit
        assert audit.query(document=2**63 - 1) == [] and audit.query(since="0001-01-01") == e
        # since <= at < until, as ISO times, dates or datetimes; UTC without an offset.
        assert audit.query(since="2025-05-02") == e[:4]
        assert audit.query(until="2025-05-02") == e[4:]
        assert audit.query(since="2025-05-02T09:00:00Z", until="2025-05-02T12:30:00Z") == [e[3]]
        assert audit.query(since="2025-05-02T11:00:00+02:00", until="2025-05-03") == [e[2], e[3]]
        assert audit.query(since=datetime(2025, 5, 3, tzinfo=UTC)) == e[:2]
        assert audit.query(since="2025-05-04") == []
        # All at once.
        assert audit.query(collection="default", principal="user:alice", action="document", document=7,
                           since="2025-05-01", until="2025-05-02") == [e[4]]
        assert audit.query(collection="hr", action="document", limit=1) == [e[2]]
        # Server events (no collection) are found by everything but a collection filter.
        assert e[1] in audit.query() and all(x.collection is not None for x in audit.query(collection="default"))

    def test_bad_filters_are_refused_naming_the_filter(self, make: MakeLog) -> None:
        audit = make()
        for filters, name in [({"collection": "../etc"}, "collection"), ({"principal": ""}, "principal"),
                              ({"principal": "x" * 201}, "principal"), ({"principal": "key:\x00"}, "principal"),
                              ({"action": "drop"}, "action"), ({"document": 2**63}, "document"),
                              ({"since": "0001-01-01T00:00:00+01:00"}, "since"),
                              ({"action": "document.%"}, "action"), ({"document": 0}, "document"),
                              ({"document": True}, "document"), ({"since": "yesterday"}, "since"),
                              ({"until": "2025-13-01"}, "until"), ({"limit": 0}, "limit"),
                              ({"limit": 10_001}, "limit"),
                              ({"since": "2025-05-02", "until": "2025-05-01"}, "until")]:
            with pytest.raises(AuditQueryError) as refused:
                audit.query(**filters)
            assert refused.value.field == name, filters

    def test_a_sweep_removes_only_the_older_events(self, make: MakeLog) -> None:
        audit = make(retention_days=30)
        old, edge, recent = (at(event("local", "search", "default", None, [n]), when)
                             for n, when in ((1, ago(days=400)), (2, ago(days=31)), (3, ago(days=1))))
        for e in (old, edge, recent):
            audit.record(e)  # the first record swept an empty trail; none since (at most hourly)
        assert audit.query() == [recent, edge, old]
        assert audit.sweep(30) == 2
        assert audit.query() == [recent]
        assert audit.sweep(30) == 0
        assert make().sweep(0.5) == 1 and audit.query() == []

    def test_a_new_process_sweeps_on_its_first_record_then_hourly(self, make: MakeLog) -> None:
        first = make(retention_days=90)
        first.record(at(event("local", "search"), ago(days=100)))
        first.record(at(event("local", "ask"), ago(days=10)))
        assert [e.action for e in first.query()] == ["ask", "search"]
        second = make(retention_days=7)  # another process, configured to keep a week
        second.record(event("local", "document.read", "default", None, [4]))
        assert [e.action for e in second.query()] == ["document.read"]
        second.record(at(event("local", "search"), ago(days=100)))  # within the hour: not swept yet
        assert [e.action for e in second.query()] == ["document.read", "search"]

    def test_concurrent_records_are_all_kept(self, make: MakeLog) -> None:
        audit = make()

        def burst(n: int) -> None:
            for i in range(20):
                audit.record(event(f"key:thread{n:04d}", "search", "default", None, [i]))

        threads = [threading.Thread(target=burst, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(audit.query(limit=1000)) == 80
        assert len(make().query(principal="key:thread0002", limit=1000)) == 20

    def test_a_malformed_event_is_dropped_not_raised(self, make: MakeLog, caplog: pytest.LogCaptureFixture) -> None:
        audit = make()
        with caplog.at_level(logging.WARNING, logger="citerag.audit"):
            audit.record(AuditEvent("not a time", "local", "search"))
            audit.record(AuditEvent(ago(), "local", "search", documents=("seven",)))  # type: ignore[arg-type]
        assert audit.query() == []
        assert "audit event dropped" in caplog.text
        audit.record(AuditEvent(ago(), "local", "search", detail={"when": datetime(2025, 5, 1)}))  # str() kept
        assert audit.query()[0].detail == {"when": "2025-05-01 00:00:00"}

    def test_recording_never_raises_where_the_database_is_unusable(self, broken: AuditLog,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.WARNING, logger="citerag.audit"):
            for n in range(3):
                broken.record(event("key:aaaa1111", "document.read", "default", "a" * 32, [n]))
        assert getattr(broken, "dropped", None) == 3
        # Said once (a failing trail is not allowed to flood the log), naming what was dropped.
        warnings = [r for r in caplog.records if r.name == "citerag.audit" and "dropped" in r.getMessage()]
        assert len(warnings) == 1 and "document.read by key:aaaa1111" in warnings[0].getMessage()
        # A read says why it cannot answer, as one line; it never pretends the trail is empty.
        with pytest.raises(StoreUnavailable):
            broken.query()
