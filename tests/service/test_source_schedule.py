"""Sources on their schedules in a running server (issue 29): a website whose server is down backs off (the gaps
between its attempts grow) and reports its error in the API and /metrics, while a watched folder keeps syncing
within seconds of a change. Real parts: the server on loopback, a closed loopback port, a real folder."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from live import live_server

from citerag.app import sources
from citerag.service.state import ServiceConfig
from corpus_paths import ROOT
from http_servers import free_port

XQUAD = ROOT / "eval" / "xquad-en" / "corpus"


def _until(what: str, ready: Callable[[], Any], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := ready()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return value


def _source(c: httpx.Client, name: str) -> dict[str, Any]:
    return dict(c.get(f"/v1/collections/default/sources/{name}").json())


def test_a_down_origin_backs_off_while_a_watched_folder_keeps_syncing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "BACKOFF_S", (1.0, 8.0))  # seconds instead of minutes: the same doubling
    share = tmp_path / "share"
    share.mkdir()
    shutil.copy(XQUAD / "Kenya.txt", share / "Kenya.txt")
    down = f"http://127.0.0.1:{free_port()}/docs/"
    with live_server(tmp_path / "home", ServiceConfig(keys_required=False), source_roots=[tmp_path]) as live, \
            live.client() as c:
        for body in ({"name": "wiki", "kind": "web", "location": down, "interval_s": 1},
                     {"name": "share", "kind": "folder", "location": str(share), "watch": True}):
            assert c.post("/v1/collections/default/sources", json=body).status_code == 201
        assert c.post("/v1/collections/default/sources/share/sync").status_code == 202  # the first sync, queued
        _until("the folder's first sync", lambda: _source(c, "share")["documents"] == 1)

        attempts: list[str] = []
        warsaw = (XQUAD / "Warsaw.txt").read_text()
        deadline = time.monotonic() + 20
        while len(attempts) < 4 and time.monotonic() < deadline:
            seen = _source(c, "wiki")
            if seen["last_attempt"] and seen["last_attempt"] not in attempts:
                attempts.append(seen["last_attempt"])
                # Meanwhile the watched folder changes, and is synced within seconds each time.
                n = len(attempts)
                (share / f"note{n}.txt").write_text(warsaw[:2000 * n])
                _until("the watched folder's change", lambda n=n: _source(c, "share")["documents"] == 1 + n,
                       timeout=10)
            time.sleep(0.1)
        wiki = _source(c, "wiki")
        assert wiki["failures"] >= 3 and wiki["last_success"] is None, wiki
        assert down in wiki["last_error"], wiki
        # Backed off: 1, 2, 4 s between attempts where the interval alone says 1 s (whole seconds in the API).
        times = [time.mktime(time.strptime(a[:19], "%Y-%m-%dT%H:%M:%S")) for a in attempts]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert gaps[-1] >= 3, (attempts, gaps)
        share_state = _source(c, "share")
        assert share_state["failures"] == 0 and share_state["last_error"] is None

        metrics = c.get("/metrics").text
        failures = [line for line in metrics.splitlines() if line.startswith("citerag_source_failures")]
        assert any(float(line.rsplit(" ", 1)[1]) >= 3 for line in failures), failures
        assert "citerag_source_last_success_timestamp_seconds" in metrics
