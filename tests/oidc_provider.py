"""A real OpenID Connect provider on loopback for the sign-in tests: panva's certified `oidc-provider` (npm, pinned
in tests/oidc/package-lock.json) run by Node.js from tests/oidc/provider.mjs. Where Node.js 20+ or
tests/oidc/node_modules is missing the tests skip with the command that enables them; under CITERAG_REQUIRE_OIDC=1
(CI, which installs both) they fail instead.

    with oidc_provider({"clients": [...], "accounts": {...}}) as issuer: ...

`sign_in_without_browser` walks the provider's development login and consent pages with httpx, as a browser
would: it reads each page's form and posts it."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl, urljoin, urlsplit

import httpx
import lxml.html
import pytest

OIDC_DIR = Path(__file__).resolve().parent / "oidc"
OIDC_INSTALL = "npm ci --prefix tests/oidc"
READY_TIMEOUT_S = 30.0


def oidc_missing() -> str | None:
    """Why the provider cannot run here, or None."""
    node = shutil.which("node")
    if node is None:
        return "Node.js not installed: apt-get install nodejs npm (Node.js 20 or later), then " + OIDC_INSTALL
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if not version.startswith("v") or int(version[1:].split(".")[0] or 0) < 20:
        return f"Node.js {version or '?'} is too old for oidc-provider 9 (Node.js 20 or later)"
    if not (OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        return f"the test OpenID Connect provider is not installed: {OIDC_INSTALL}"
    return None


def require_oidc() -> None:
    """Where the provider cannot run: skip, with the reason; under CITERAG_REQUIRE_OIDC=1 (CI, which installs
    Node.js and runs `npm ci --prefix tests/oidc`) fail instead, so a skip never hides an untested sign-in."""
    missing = oidc_missing()
    if missing is None:
        return
    if os.environ.get("CITERAG_REQUIRE_OIDC", "") not in ("", "0"):
        pytest.fail(f"{missing} (and CITERAG_REQUIRE_OIDC is set)", pytrace=False)
    pytest.skip(missing)


def _pump(out: IO[str] | None, lines: queue.Queue[str]) -> None:
    """The provider's stdout, line by line, then "" at its end (the provider exited)."""
    assert out is not None
    for line in out:
        lines.put(line)
    lines.put("")


@contextmanager
def oidc_provider(config: Mapping[str, Any], timeout: float = READY_TIMEOUT_S) -> Iterator[str]:
    """The provider with `config` (see tests/oidc/provider.mjs) on a free loopback port; yields its issuer URL
    (http://127.0.0.1:PORT) once it listens, and kills it at exit."""
    require_oidc()
    with tempfile.TemporaryFile() as stderr:
        # Port 0: the provider binds a free port itself and names it in its READY line (no race for a port).
        server = subprocess.Popen(["node", str(OIDC_DIR / "provider.mjs"), "0"], cwd=OIDC_DIR,
                                  env={**os.environ, "OIDC_CONFIG": json.dumps(config)},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_pump, args=(server.stdout, lines), daemon=True).start()
        try:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                line = ""
            if not line.startswith("READY "):
                server.kill()
                server.wait(10)
                stderr.seek(0)
                tail = stderr.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"the OIDC provider did not start within {timeout:.0f} s: {line!r}\n{tail}")
            yield line.split()[1]
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(10)


def _xpath(html: str, path: str) -> list[Any]:
    found = lxml.html.fromstring(html).xpath(path)
    return found if isinstance(found, list) else []


def _form(html: str, base: str) -> tuple[str, dict[str, str]]:
    """The page's (first) form: its absolute action URL and its named inputs' values."""
    forms = _xpath(html, "//form")
    assert forms, f"no form on the provider's page: {html[:500]}"
    fields = {str(e.get("name")): str(e.get("value") or "") for e in forms[0].xpath(".//input[@name]")}
    return urljoin(base, forms[0].get("action") or base), fields


def sign_in_without_browser(http: httpx.Client, authorization_url: str, login: str, redirect_uri: str,
                            password: str = "any", cancel: bool = False) -> dict[str, str]:
    """Follows the authorization URL through the provider's login page (login = the account id; the password is
    not checked) and consent page, as a browser would, and returns the query parameters the provider sends to
    `redirect_uri` (code, state, iss; or error, error_description, state). `cancel`: follow the pages' "[ Cancel ]"
    link instead (error=access_denied). `http` keeps the provider's cookies; redirects are followed by hand so that
    the one to `redirect_uri` (where nothing listens) is caught."""
    url, method, data = authorization_url, "GET", None
    for _ in range(20):
        response = http.request(method, url, data=data, follow_redirects=False)
        if response.is_redirect:
            url, method, data = urljoin(url, response.headers["location"]), "GET", None
            if url.startswith(redirect_uri):
                return dict(parse_qsl(urlsplit(url).query))
            continue
        assert response.status_code == 200, f"{response.status_code} from {url}: {response.text[:500]}"
        if cancel:
            abort = _xpath(response.text, "//a[contains(@href, '/abort')]/@href")
            assert abort, f"no Cancel link on the provider's page: {response.text[:500]}"
            url, method, data = urljoin(url, str(abort[0])), "GET", None
            continue
        action, fields = _form(response.text, url)
        if fields.get("prompt") == "login":
            fields.update(login=login, password=password)
        url, method, data = action, "POST", fields
    raise AssertionError(f"the sign-in did not come back to {redirect_uri}")
