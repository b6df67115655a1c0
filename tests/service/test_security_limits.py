"""Issue 25, hole 5: no way around the rate limit. The session routes count like every other route (per address
without a valid key, per key with one), so they are no key oracle past a 429; and a forged X-Forwarded-For buys
no fresh budget: `citerag serve` trusts proxy headers only from the addresses `--forwarded-allow-ips` names,
whatever uvicorn's FORWARDED_ALLOW_IPS says. The real command in a real process for the second: its uvicorn
settings are what is tested."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from live import live_server

from citerag.keystore.sqlite import SqliteKeyStore
from citerag.service.state import ServiceConfig
from http_servers import citerag_serve


def test_the_session_routes_are_inside_the_rate_limit(tmp_path: Path) -> None:
    key = SqliteKeyStore(tmp_path).create(None, "admin")
    with live_server(tmp_path, ServiceConfig(rate_limit="3/minute")) as server, server.client() as c:
        assert [c.get("/v1/collections").status_code for _ in range(3)] == [401] * 3  # this address's budget spent
        for response in (c.post("/v1/session", json={"key": "crk_00000000_guess"}), c.get("/v1/session"),
                         c.get("/v1/session", headers={"Authorization": "Bearer crk_00000000_guess"}),
                         c.delete("/v1/session")):
            assert response.status_code == 429, response.text
            assert "for this address" in response.json()["error"] and int(response.headers["Retry-After"]) >= 1
        # A valid key is counted against its own budget, as on every other route: signing in with it still works,
        # and its sign-ins and session checks spend that budget.
        assert c.post("/v1/session", json={"key": key}).status_code == 204
        assert c.get("/v1/session").json() == {"keys_required": True, "authenticated": True, "scope": "admin",
                                                 "collection": None, "oidc": False, "user": None, "groups": []}
        assert c.get("/v1/collections").status_code == 200
        over = c.get("/v1/session")
        assert over.status_code == 429 and "for this key" in over.json()["error"]


@contextmanager
def serve(home: Path, *args: str, allow_env: str | None = None) -> Iterator[str]:
    env = {k: v for k, v in os.environ.items() if k != "FORWARDED_ALLOW_IPS"}
    if allow_env is not None:
        env["FORWARDED_ALLOW_IPS"] = allow_env
    with citerag_serve(home, "--rate-limit", "3/minute", *args, env=env) as url:
        yield url


def _codes(url: str, forwarded: list[str]) -> list[int]:
    with httpx.Client(base_url=url, timeout=30) as c:  # no key: each request is counted against an address
        return [c.get("/v1/collections", headers={"X-Forwarded-For": f}).status_code for f in forwarded]


# uvicorn's own default trusts X-Forwarded-For from 127.0.0.1 (a local proxy: anyone behind it forges any
# address), and from whatever its FORWARDED_ALLOW_IPS variable names: neither is trusted without the option.
@pytest.mark.parametrize("allow_env", [None, "*"])
def test_a_forged_x_forwarded_for_gets_no_fresh_budget(tmp_path: Path, allow_env: str | None) -> None:
    with serve(tmp_path / "home", allow_env=allow_env) as url:
        assert _codes(url, [f"203.0.113.{i}" for i in range(6)]) == [401] * 3 + [429] * 3


def test_behind_a_configured_proxy_the_forwarded_address_is_counted(tmp_path: Path) -> None:
    with serve(tmp_path / "home", "--forwarded-allow-ips", "127.0.0.1", allow_env="*") as url:
        assert _codes(url, ["203.0.113.1"] * 4) == [401] * 3 + [429]
        assert _codes(url, ["203.0.113.2"] * 2) == [401] * 2  # another client behind the proxy: its own budget
        assert _codes(url, ["198.51.100.7, 203.0.113.1"]) == [429]  # the proxy appends: the last hop is the client
