"""Requests per key per window: a 429 with Retry-After past the budget, per key (one team's burst does not throttle
another), failed key guesses counted per address, and one budget shared by every API process through Redis."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from live import live_server

from citerag.app.home import open_key_store
from citerag.cli import main
from citerag.service.state import ServiceConfig
from citerag.settings import Settings


def _keys(home: Path, n: int) -> list[str]:
    store = open_key_store(Settings(index_dir=home))
    try:
        return [store.create(None, "admin") for _ in range(n)]
    finally:
        store.close()


def test_a_key_over_its_budget_gets_429_with_retry_after_and_other_keys_do_not(tmp_path: Path) -> None:
    first, second = _keys(tmp_path, 2)
    with live_server(tmp_path, ServiceConfig(rate_limit="5/minute")) as server:
        with server.client(first) as a, server.client(second) as b:
            assert [a.get("/v1/collections").status_code for _ in range(5)] == [200] * 5
            over = a.get("/v1/collections")
            assert over.status_code == 429
            assert 1 <= int(over.headers["Retry-After"]) <= 60
            assert "rate limit of 5/minute" in over.json()["error"]
            assert b.get("/v1/collections").status_code == 200  # another key has its own budget
        with server.client("crk_00000000_guess") as guesser:  # a wrong key is counted against its address
            codes = [guesser.get("/v1/collections").status_code for _ in range(6)]
    assert codes == [401] * 5 + [429]


def test_every_api_process_counts_against_one_budget_in_redis(tmp_path: Path, redis_url: str) -> None:
    (key,) = _keys(tmp_path, 1)
    config = ServiceConfig(rate_limit="4/minute", rate_limit_storage=redis_url)
    with live_server(tmp_path, config) as one, live_server(tmp_path, config) as two, \
            one.client(key) as a, two.client(key) as b:
        codes = [(a if i % 2 else b).get("/v1/collections").status_code for i in range(6)]
    assert codes == [200] * 4 + [429] * 2


@pytest.mark.parametrize(("args", "message"), [
    (["--rate-limit", "3/fortnight"], "--rate-limit '3/fortnight': expected N/second"),
    (["--rate-limit-storage", "redis://127.0.0.1:1/0"], "cannot reach it"),
    (["--forwarded-allow-ips", "10.0.0.5,proxy.local"], "'proxy.local' is not an address or network"),
])
def test_a_wrong_rate_limit_is_one_line_before_anything_starts(tmp_path: Path, args: list[str], message: str,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["citerag", "serve", "--index", str(tmp_path / "ix"), *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "ix").exists()
