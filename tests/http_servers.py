"""Real HTTP servers on loopback: a scripted stdlib server and llama-cpp-python's for the generator tests, and
`citerag serve` itself."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx


@dataclass
class Reply:
    status: int = 200
    content: str = "An answer [1]."
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    stream: list[str] | None = None  # SSE text deltas, sent one event at a time
    raw: bytes | None = None


class ScriptedServer:
    """A stdlib HTTP server answering POST /v1/chat/completions from a script of replies, in order, or from
    `respond(request body)` for every request (a model that reacts to what it is sent)."""

    def __init__(self, replies: list[Reply], respond: Callable[[dict[str, Any]], Reply] | None = None) -> None:
        self.replies = list(replies)
        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                outer.requests.append({"path": self.path, "body": body,
                                       "authorization": self.headers.get("authorization")})
                if outer.respond is not None:
                    reply = outer.respond(body)
                else:
                    reply = outer.replies.pop(0) if outer.replies else Reply(500, "script exhausted")
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.stream is not None:
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.end_headers()
                    for piece in reply.stream:
                        event = {"choices": [{"index": 0, "delta": {"content": piece}}]}
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b": keep-alive comment\n\ndata: [DONE]\n\n")
                    return
                if reply.raw is not None:
                    data = reply.raw
                elif reply.status == 200:
                    data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant",
                                                                          "content": reply.content}}]}).encode()
                else:
                    data = json.dumps({"error": {"message": reply.content}}).encode()
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path | None = None, timeout: float = 120) -> None:
    """Until `citerag serve` (or a worker's metrics server) at `url` answers GET /healthz with a 200; an error
    naming the end of its log if the process exits or the time runs out first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
            raise RuntimeError(f"the server at {url} did not start: {tail}")
        time.sleep(0.2)


@contextmanager
def citerag_serve(home: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """A real `citerag serve --index HOME ARGS` on a free loopback port (uvicorn with citerag's guarded protocol,
    as users run it); its URL once healthy, stopped with SIGINT after."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "citerag.cli", "serve", "--index", str(home), "--port",
                                str(port), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
    except RuntimeError:
        process.kill()
        raise AssertionError(f"citerag serve did not start: {process.stderr.read()!r}") from None  # type: ignore[union-attr]
    try:
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class LlamaServer:
    """`python -m llama_cpp.server` with a GGUF model, on a free loopback port, for the life of a fixture."""

    def __init__(self, model: Path, log: Path, n_ctx: int = 2048) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        # One thread and passive OpenMP waits: spinning threads crawl on a busy 2-core machine.
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(n_ctx), "--n_threads", "1", "--seed", "0"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def wait(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {self.proc.returncode}; see {self._log.name}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"llama_cpp.server did not come up within {seconds}s; see {self._log.name}")

    @staticmethod
    @contextmanager
    def running(model: Path, log: Path) -> Iterator[LlamaServer]:
        """A server up for the block (waited for), stopped after it."""
        server = LlamaServer(model, log)
        try:
            server.wait()
            yield server
        finally:
            server.stop()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
