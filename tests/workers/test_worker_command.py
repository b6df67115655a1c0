"""`citerag worker` as a user meets it: one-line errors for settings it cannot run with, procrastinate's schema
applied once however many processes start together, and the layering rule (only the application core composes)."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from queue_harness import make_home

from citerag.jobs import procrastinate as q


def worker(home: Path, *env: tuple[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "citerag.cli", "worker", "--index", str(home)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **dict(env)})


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_a_sqlite_store_is_refused_in_one_line(tmp_path: Path) -> None:
    line = one_line(worker(tmp_path / "home"))
    assert line.startswith("error: the procrastinate queue needs a postgresql:// store_url"), line


def test_the_thread_queue_is_refused_in_one_line(pg_url: str, tmp_path: Path) -> None:
    make_home(tmp_path / "home", pg_url, queue="thread")
    line = one_line(worker(tmp_path / "home"))
    assert "queue = \"procrastinate\"" in line, line


def test_an_unreachable_database_is_one_line_without_the_password(tmp_path: Path) -> None:
    from citerag.local_postgres import free_port

    url = f"postgresql://citerag:s3cret@127.0.0.1:{free_port()}/nothing"
    line = one_line(worker(tmp_path / "home", ("CITERAG_STORE_URL", url), ("CITERAG_QUEUE", "procrastinate")))
    assert line.startswith("error: ") and "127.0.0.1" in line and "s3cret" not in line, line


def test_the_queue_schema_is_applied_once_when_many_processes_start_at_once(pg_url: str) -> None:
    def start(_: int) -> bool:
        app = q.api_app(pg_url)
        app.open()
        try:
            q.ensure_schema(app, pg_url)
            return app.check_connection()
        finally:
            app.close()

    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(start, range(6)))
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'procrastinate_jobs'").fetchone() == (1,)
