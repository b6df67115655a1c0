"""Real origins on loopback for the source tests: a stdlib HTTP server serving a folder as a website (validators,
304s, robots.txt, a redirect, a request log) and a `git daemon` serving repositories."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import formatdate, parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from http_servers import free_port

TYPES = {".html": "text/html; charset=utf-8", ".pdf": "application/pdf", ".xml": "application/xml",
         ".txt": "text/plain", ".css": "text/css"}


class Site:
    """Serves `root` as it is at each request; `log` holds (method, path, status, user agent) of every request."""

    def __init__(self, root: Path, port: int = 0) -> None:
        self.root = root
        self.log: list[tuple[str, str, int, str]] = []
        self.on_request: Callable[[str], None] | None = None  # told each path before it is answered
        self.status: dict[str, int] = {}  # path -> forced status
        self.delay: dict[str, float] = {}
        self.no_length: set[str] = set()  # sent without Content-Length (the body ends when the connection closes)
        self.plain = False  # no validators at all: every request gets the body
        self.redirects = {"/docs/old.html": "/docs/new.html"}
        site = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_GET(self) -> None:  # noqa: N802
                path = urlsplit(self.path).path
                if site.on_request is not None:
                    site.on_request(path)
                time.sleep(site.delay.get(path, 0.0))
                file = site.root / path.lstrip("/")
                if path in site.status:
                    self.reply(site.status[path], b"error")
                elif path in site.redirects:
                    self.reply(301, b"", {"Location": site.redirects[path]})
                elif not file.is_file():
                    self.reply(404, b"not found")
                else:
                    data, mtime = file.read_bytes(), int(file.stat().st_mtime)
                    etag = '"' + hashlib.sha256(data).hexdigest()[:20] + '"'
                    headers = {} if site.plain else {"ETag": etag, "Last-Modified": formatdate(mtime, usegmt=True)}
                    inm, ims = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
                    fresh = inm == etag if inm else bool(ims) and parsedate_to_datetime(ims).timestamp() >= mtime
                    if fresh and not site.plain:
                        self.reply(304, b"", headers)
                    else:
                        self.reply(200, data, {**headers, "Content-Type": TYPES.get(file.suffix, "image/png")})

            def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
                path = urlsplit(self.path).path
                site.log.append(("GET", path, status, self.headers.get("User-Agent", "")))
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                if path not in site.no_length:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if status not in (304,):
                    self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that timed out closed its socket: not the test's concern

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def paths(self, since: int = 0, status: int | None = None) -> list[str]:
        return [p for _, p, s, _ in self.log[since:] if status is None or s == status]


def page(title: str, links: list[str], head: str = "") -> str:
    items = "".join(f'<li><a href="{h}">{h}</a></li>' for h in links)
    return f"<!DOCTYPE html><html><head><title>{title}</title>{head}</head><body><h1>{title}</h1><ul>{items}</ul>" \
           "</body></html>"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org",
                           "-c", "commit.gpgsign=false", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@dataclass
class Served:
    repo: Path  # the working tree the daemon serves (commits made in it are what a client fetches next)
    url: str
    daemon: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.daemon.poll() is None:
            os.killpg(self.daemon.pid, signal.SIGTERM)
            self.daemon.wait(timeout=10)


def start_daemon(base: Path, repo: Path, log: Path) -> Served:
    """`git daemon` on a free loopback port serving every repository under `base`; `repo` is the one tests use."""
    port = free_port()
    out = log.open("wb")
    daemon = subprocess.Popen(["git", "daemon", "--reuseaddr", f"--base-path={base}", "--export-all",
                               "--informative-errors", "--listen=127.0.0.1", f"--port={port}",
                               "--enable=receive-pack", str(base)], stdout=out, stderr=out,
                              start_new_session=True)
    out.close()
    served = Served(repo, f"git://127.0.0.1:{port}/{repo.relative_to(base).as_posix()}", daemon)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return served
        except OSError:
            if daemon.poll() is not None or time.monotonic() > deadline:
                served.stop()
                raise RuntimeError(f"git daemon did not start: {log.read_text()}") from None
            time.sleep(0.05)
