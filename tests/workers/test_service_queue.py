"""The service with queue = "procrastinate": a real `citerag serve` process and a real `citerag worker` process on
one PostgreSQL. Uploads become jobs (the API never indexes), status and the event stream follow them, the queue
depth comes from procrastinate's table, originals come from the shared table, and a replacement goes through a
worker too."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import httpx
from queue_harness import Worker, api_up, database, make_home, serve, wait_for

from corpus_paths import DEV_CORPUS

FILES = [DEV_CORPUS / "apa.en.html", DEV_CORPUS / "ch08.en.html"]
DOCS = "/v1/collections/default/documents"


def _events_until_done(client: httpx.Client, ids: list[int], timeout: float) -> list[dict[str, object]]:
    """The `status` events of the documents' event stream up to its `done` event."""
    statuses: list[dict[str, object]] = []
    deadline = time.monotonic() + timeout
    with client.stream("GET", f"{DOCS}/events", params={"ids": ",".join(map(str, ids))},
                       timeout=httpx.Timeout(timeout, read=30)) as stream:
        event = ""
        for line in stream.iter_lines():
            if time.monotonic() > deadline:
                raise AssertionError(f"no `done` event within {timeout:g}s: {statuses[-4:]}")
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "status":
                statuses.append(json.loads(line.partition(":")[2]))
            elif line.startswith("data:") and event == "done":
                return statuses
    raise AssertionError("the event stream ended without `done`")


def test_uploads_are_jobs_that_a_worker_indexes_while_the_api_reports_them(pg_url: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_home(home, pg_url)
    server, client = serve(home, tmp_path / "serve.log")
    worker = Worker(home, tmp_path / "worker.log")
    started = time.monotonic()
    try:
        wait_for("the server", lambda: api_up(client, DOCS) or server.poll() is not None, 120)
        assert server.poll() is None, (tmp_path / "serve.log").read_text()
        response = client.post(DOCS, files=[("files", (p.name, p.read_bytes())) for p in FILES])
        assert response.status_code == 202, response.text
        ids = [d["id"] for d in response.json()["documents"]]
        # No worker yet: the jobs wait in procrastinate's table, and the API says so.
        for doc_id in ids:
            doc = client.get(f"{DOCS}/{doc_id}").json()
            assert (doc["status"], doc["job"]) == ("pending", "queued"), doc
        assert "citerag_ingest_queue_depth 2.0" in client.get("/metrics").text

        worker.start()
        statuses = _events_until_done(client, ids, 300)
        assert {(s["id"], s["status"]) for s in statuses} >= {(i, "indexed") for i in ids}
        for doc_id in ids:
            doc = client.get(f"{DOCS}/{doc_id}").json()
            assert (doc["status"], doc["job"], doc["error"]) == ("indexed", None, None), doc
        assert "citerag_ingest_queue_depth 0.0" in client.get("/metrics").text
        # The original comes back from the shared table, byte for byte.
        assert client.get(f"{DOCS}/{ids[0]}/file").content == FILES[0].read_bytes()
        hits = client.post("/v1/collections/default/search", json={"query": "Debian package management"})
        assert hits.status_code == 200 and hits.json()["results"], hits.text

        # A replacement is a job too: the worker indexes it, and the old bytes go once nothing refers to them.
        old = FILES[1].read_bytes()
        new = old.replace(b"</body>", b"<p>A replacement paragraph about apt-listbugs.</p></body>")
        response = client.put(f"{DOCS}/{ids[1]}", files={"file": (FILES[1].name, new)})
        assert response.status_code == 202, response.text
        sha_new = hashlib.sha256(new).hexdigest()

        def replaced() -> bool:
            doc = client.get(f"{DOCS}/{ids[1]}").json()
            return doc["job"] is None and doc["status"] == "indexed" and doc["sha256"] == sha_new

        wait_for("the replacement indexed", replaced, 300)
        with database(pg_url) as db:
            kept = {r[0] for r in db.rows("SELECT sha256 FROM originals")}
            assert hashlib.sha256(old).hexdigest() not in kept and sha_new in kept
            assert len(db.rows("SELECT id FROM procrastinate_jobs WHERE status = 'succeeded'")) == 3
        assert client.post(f"{DOCS}/{ids[1]}/retry").status_code == 409  # indexed: nothing to retry
    finally:
        client.close()
        if worker.process is not None:
            assert worker.stop() == 0, worker.output()
        server.terminate()
        server.wait(30)
    print(f"service + worker: {time.monotonic() - started:.1f}s")
