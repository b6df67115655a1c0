"""Sources' syncs as jobs of the shared queue (issue 29): with queue = "procrastinate", a real `citerag serve`
defers a source's sync (asked over the API, or due on its interval) into PostgreSQL and never runs it; a real
`citerag worker` takes it, at most one waiting and one running per source. The documents are XQuAD articles
(CC-BY-SA 4.0, eval/xquad-en)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from queue_harness import Worker, api_up, database, make_home, serve, wait_for

from corpus_paths import ROOT

XQUAD = ROOT / "eval" / "xquad-en" / "corpus"
SOURCES = "/v1/collections/default/sources"


def test_a_servers_syncs_are_jobs_a_worker_runs(pg_url: str, tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    for name in ("Kenya", "Warsaw"):
        shutil.copy(XQUAD / f"{name}.txt", share / f"{name}.txt")
    home = tmp_path / "home"
    make_home(home, pg_url, source_roots=[str(tmp_path)])
    server, client = serve(home, tmp_path / "serve.log")
    worker = Worker(home, tmp_path / "worker.log")
    try:
        wait_for("the server", lambda: api_up(client, SOURCES) or server.poll() is not None, 120)
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
        added = client.post(SOURCES, json={"name": "share", "kind": "folder", "location": str(share)})
        assert added.status_code == 201, added.text
        # Asked twice with no worker running: one job waits in the sources' queue; the server syncs nothing.
        assert client.post(f"{SOURCES}/share/sync").status_code == 202
        assert client.post(f"{SOURCES}/share/sync").status_code == 202
        with database(pg_url) as db:
            waiting = lambda: [r for r in db.rows("SELECT status, lock FROM procrastinate_jobs "  # noqa: E731
                                                  "WHERE queue_name = 'citerag-sources'")]
            wait_for("the deferred sync", waiting, 30)
            time.sleep(2)  # a tick of the server's scheduler later, still one job, still waiting
            assert waiting() == [("todo", "citerag-source:default:share")]
        assert client.get(f"{SOURCES}/share").json()["last_attempt"] is None

        worker.start()
        synced = wait_for("the worker's sync", lambda: (s := client.get(f"{SOURCES}/share").json())["last_success"]
                          and s, 180)
        assert synced["documents"] == 2 and synced["last"]["added"] == 2, synced
        assert synced["by"].split(":")[1] == str(worker.pid), (synced["by"], worker.pid)
        docs = client.get("/v1/collections/default/documents").json()["documents"]
        assert sorted(d["name"] for d in docs) == ["Kenya.txt", "Warsaw.txt"]

        # On a schedule: due every 2 s, each sync deferred and run by the worker, never by the server.
        (share / "Oxygen.txt").write_text((XQUAD / "Oxygen.txt").read_text())
        changed = client.post(SOURCES, json={"name": "again", "kind": "folder", "location": str(share),
                                             "interval_s": 2})
        assert changed.status_code == 201
        first = wait_for("the scheduled syncs", lambda: (s := client.get(f"{SOURCES}/again").json())["last_success"]
                         and s, 120)
        second = wait_for("the next scheduled sync", lambda: (s := client.get(f"{SOURCES}/again").json())[
            "last_attempt"] != first["last_attempt"] and s, 60)
        assert second["by"].split(":")[1] == str(worker.pid) and second["last"]["fetched"] == 0, second
        with database(pg_url) as db:
            ran = db.rows("SELECT count(*) FROM procrastinate_jobs WHERE queue_name = 'citerag-sources' "
                          "AND status = 'succeeded'")[0][0]
        assert ran >= 3
        assert worker.alive(), worker.output()
    finally:
        client.close()
        server.terminate()
        server.wait(30)
        if worker.process is not None:
            worker.stop()
