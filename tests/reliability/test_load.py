"""The load test, short: 50 locust users for 10 s against a real `citerag serve` while uploads are indexed.

The harness is benchmarks/bench_load.py's (the full run, 60 s cold and warm, is `python benchmarks/bench_load.py`).
Here it runs once, cold, with the uploads going into the collection being asked, so that the readers share a store
with the indexing thread that writes into it. Nothing here asserts a latency or a throughput: those depend on the
machine and are the benchmark's to measure; this asserts what must hold on any machine.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
UPLOADS = 30  # enough that the indexing thread is busy for the whole run here, few enough to settle soon after


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_load
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return bench_load


@pytest.fixture(scope="module")
def run(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("load")
    uploads = bench.upload_corpus(work / "uploads", UPLOADS)
    # Three chapters answer the questions drawn from them; the rest of the dev set's questions are refused or
    # answered from a weaker source, which is load all the same.
    chapters = [bench.CORPUS / name for name in ("pr01.en.html", "ch08.en.html", "apa.en.html")]
    with bench.serve(work / "home", chapters, work / "serve.log") as server:
        result: dict[str, Any] = bench.run_load(server, work, label="short", collection="default", users=50,
                                                seconds=10, max_requests=3000, uploads=uploads,
                                                upload_collection="default", settle_timeout=120)
    return result


def test_fifty_users_get_no_error_while_uploads_are_indexed(run: dict[str, Any]) -> None:
    assert run["users"] == 50
    assert run["errors"] == 0, run["error_kinds"]
    assert run["requests"] > 0
    assert set(run["by_endpoint"]) == {"ask", "search"}
    assert run["requests"] <= run["max_requests"]


def test_the_uploads_were_indexed_while_the_users_asked_and_none_was_lost(run: dict[str, Any]) -> None:
    ingestion = run["ingestion"]
    assert ingestion["errors"] == []
    # Every upload was accepted before the last answer went out: the indexing thread had them queued during the run.
    assert ingestion["uploaded_s"] is not None and ingestion["uploaded_s"] < run["measured_s"]
    assert ingestion["settled_s"] is not None, "the uploads did not finish indexing within the bound"
    assert ingestion["statuses"] == {"indexed": UPLOADS, "failed": 0}


def test_every_citation_returned_under_load_quotes_its_document(run: dict[str, Any]) -> None:
    # Each distinct (document, start, end) any answer or search returned, against GET .../documents/{id}/text.
    assert run["citations"]["checked"] > 0
    assert run["citations"]["invalid"] == []


def test_a_cold_run_misses_every_cache(run: dict[str, Any]) -> None:
    # Each request a new text: no answer may come from a cache (a hit would mean the harness measured no work).
    assert run["ask_cache"]["answer"][0] == 0
    assert run["cache_lookups"]["query"]["hit"] == 0
