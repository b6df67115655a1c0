"""GET /v1/audit (a server admin key) and GET /v1/collections/{name}/audit (an admin of the collection): the trail
the service holds (svc.audit), filtered as `citerag audit` is. A reader or writer of the collection gets a 403,
another collection's key a 404 (as on every route), a bad filter a 422 naming it. On both backends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from live import LiveServer, live_server

from citerag.app.home import open_key_store
from citerag.audit.base import AuditEvent, event
from citerag.settings import Settings

Q = "What is the notice period in the payroll runbook?"


def _at(e: AuditEvent, when: str) -> AuditEvent:
    return AuditEvent(when, e.principal, e.action, e.collection, e.trace_id, e.documents, e.detail)


# Recorded oldest first; principals of their own, so that whatever else the server records does not disturb them.
EVENTS = [
    _at(event("user:audit-alice", "search", "default", "a" * 32, [3, 7], status=200), "2025-05-01T09:00:00Z"),
    _at(event("user:audit-alice", "document.read", "default", "b" * 32, [7], view="text"), "2025-05-01T10:00:00Z"),
    _at(event("user:audit-bob", "ask", "hr", "c" * 32, [12], question=Q), "2025-05-02T09:00:00Z"),
    _at(event("key:audit000", "document.groups", "hr", None, [12], groups=["hr"]), "2025-05-02T12:30:00Z"),
    _at(event("key:audit000", "key.create", None, None, (), scope="read"), "2025-05-03T08:00:00Z"),
    _at(event("user:audit-bob", "document.delete", "default", "d" * 32, [3]), "2025-05-03T09:00:00Z"),
]
MINE = {"user:audit-alice", "user:audit-bob", "key:audit000"}


@dataclass
class Audited:
    server: LiveServer
    admin: str  # server admin
    default_admin: str
    default_write: str
    default_read: str
    hr_admin: str


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def audited(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audited]:
    home = tmp_path_factory.mktemp(f"audit-{request.param}")
    url = "" if request.param == "sqlite" else str(request.getfixturevalue("pg_server").create_database("audit"))
    keys = open_key_store(Settings(index_dir=home, store_url=url))
    try:
        admin = keys.create(None, "admin")
        with live_server(home, store_url=url) as server:
            with server.client(admin) as c:
                assert c.post("/v1/collections", json={"name": "hr"}).status_code == 201
            for e in EVENTS:
                server.service.audit.record(e)
            yield Audited(server, admin, keys.create("default", "admin"), keys.create("default", "write"),
                          keys.create("default", "read"), keys.create("hr", "admin"))
    finally:
        keys.close()


def get(audited: Audited, key: str, path: str, **params: Any) -> Any:
    with audited.server.client(key) as c:
        return c.get(path, params=params)


def mine(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    data = response.json()
    assert set(data) == {"events", "retention_days"} and data["retention_days"] == 90
    ats = [e["at"] for e in data["events"]]
    assert ats == sorted(ats, reverse=True)  # newest first
    return [e for e in data["events"] if e["principal"] in MINE]


def expected(*indexes: int) -> list[dict[str, Any]]:
    return [EVENTS[i].as_json() for i in indexes]


def test_the_service_holds_the_home_s_trail(audited: Audited) -> None:
    assert audited.server.service.audit.retention_days == 90
    assert audited.server.service.audit.query(principal="key:audit000", limit=5) == [EVENTS[4], EVENTS[3]]


def test_the_server_admin_sees_every_collection_and_the_server_s_events(audited: Audited) -> None:
    assert mine(get(audited, audited.admin, "/v1/audit")) == expected(5, 4, 3, 2, 1, 0)
    assert mine(get(audited, audited.admin, "/v1/collections/hr/audit")) == expected(3, 2)
    assert mine(get(audited, audited.admin, "/v1/audit", collection="default")) == expected(5, 1, 0)


def test_a_collection_admin_sees_its_collection_only(audited: Audited) -> None:
    found = get(audited, audited.default_admin, "/v1/collections/default/audit")
    assert mine(found) == expected(5, 1, 0)
    assert all(e["collection"] == "default" for e in found.json()["events"])
    # The collection is the path's: a query's own collection is not a filter of this route.
    assert mine(get(audited, audited.default_admin, "/v1/collections/default/audit", collection="hr")) == \
        expected(5, 1, 0)
    assert mine(get(audited, audited.hr_admin, "/v1/collections/hr/audit")) == expected(3, 2)


def test_who_may_not_read_the_trail(audited: Audited) -> None:
    for key in (audited.default_read, audited.default_write):
        refused = get(audited, key, "/v1/collections/default/audit")
        assert refused.status_code == 403 and refused.json()["field"] is None, refused.text
        assert get(audited, key, "/v1/audit").status_code == 403
    # Another collection's key, even its admin: the collection does not exist for it.
    hidden = get(audited, audited.hr_admin, "/v1/collections/default/audit")
    assert hidden.status_code == 404 and hidden.json() == {"error": "collection 'default' not found", "field": None}
    assert get(audited, audited.default_admin, "/v1/collections/hr/audit").status_code == 404
    assert get(audited, audited.hr_admin, "/v1/audit").status_code == 403
    assert get(audited, audited.default_admin, "/v1/audit").status_code == 403
    assert get(audited, audited.admin, "/v1/collections/nowhere/audit").status_code == 404
    with audited.server.client() as anonymous:
        assert anonymous.get("/v1/audit").status_code == 401
        assert anonymous.get("/v1/collections/default/audit").status_code == 401


@pytest.mark.parametrize(("params", "indexes"), [
    ({"principal": "user:audit-alice"}, (1, 0)),
    ({"action": "document"}, (5, 3, 1)),
    ({"action": "key.create"}, (4,)),
    ({"document": 12}, (3, 2)),
    ({"since": "2025-05-02", "until": "2025-05-03"}, (3, 2)),
    ({"since": "2025-05-02T11:30:00+01:00"}, (5, 4, 3)),
    ({"collection": "default", "action": "document", "document": 3}, (5,)),
])
def test_the_server_route_s_filters(audited: Audited, params: dict[str, Any], indexes: tuple[int, ...]) -> None:
    assert mine(get(audited, audited.admin, "/v1/audit", **params)) == expected(*indexes)


def test_the_collection_route_s_filters_and_limit(audited: Audited) -> None:
    path = "/v1/collections/default/audit"
    assert mine(get(audited, audited.default_admin, path, principal="user:audit-bob")) == expected(5)
    assert mine(get(audited, audited.default_admin, path, document=7, action="document.read")) == expected(1)
    assert mine(get(audited, audited.default_admin, path, until="2025-05-01T10:00:00Z")) == expected(0)
    limited = get(audited, audited.admin, "/v1/audit", principal="user:audit-alice", limit=1)
    assert mine(limited) == expected(1) and len(limited.json()["events"]) == 1


@pytest.mark.parametrize(("params", "field"), [
    ({"since": "yesterday"}, "since"), ({"until": "2025-02-30"}, "until"),
    ({"since": "2025-05-02", "until": "2025-05-01"}, "until"), ({"action": "drop"}, "action"),
    ({"document": "0"}, "document"), ({"document": "seven"}, "document"), ({"document": str(2**63)}, "document"),
    ({"limit": "0"}, "limit"), ({"limit": "10001"}, "limit"), ({"principal": "x" * 201}, "principal"),
    ({"principal": "key:\x01"}, "principal"), ({"collection": "../x"}, "collection"),
])
def test_a_bad_filter_is_a_422_naming_it(audited: Audited, params: dict[str, Any], field: str) -> None:
    paths = ["/v1/audit"] + ([] if field == "collection" else ["/v1/collections/default/audit"])
    for path in paths:
        refused = get(audited, audited.admin, path, **params)
        assert refused.status_code == 422 and refused.json()["field"] == field, (path, refused.text)


def test_the_routes_are_in_the_schema(audited: Audited) -> None:
    with audited.server.client() as c:
        paths = c.get("/openapi.json").json()["paths"]
    for path in ("/v1/audit", "/v1/collections/{name}/audit"):
        names = {p["name"] for p in paths[path]["get"]["parameters"]}
        assert {"principal", "action", "document", "since", "until", "limit"} <= names, path


def test_a_server_without_a_trail_answers_empty(tmp_path: Path) -> None:
    keys = open_key_store(Settings(index_dir=tmp_path))
    admin = keys.create(None, "admin")
    with live_server(tmp_path, audit_retention_days=0) as server:
        server.service.audit.record(EVENTS[0])
        found = get(Audited(server, admin, "", "", "", ""), admin, "/v1/audit")
        assert found.status_code == 200 and found.json() == {"events": [], "retention_days": 0}
    assert not (tmp_path / "audit.sqlite3").exists()
