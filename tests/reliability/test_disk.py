"""Resources: a full disk and a read-only index directory give one clear line, corrupt nothing and recover.

The file systems are real: a tmpfs of a few megabytes mounted for the test inside a private user and mount
namespace (`unshare -rm`; root does not need the user namespace), given more room with `mount -o remount,size=`
and made read-only with `mount -o remount,ro` (permissions do not stop root, a read-only mount does). The mounts
exist only inside the namespace, so each scenario is one run of disk_driver.py there: it runs the real CLI, a real
`citerag serve`, or the application in process, checks what is left on disk after every step (sqlite's integrity
check, every document whole against a fresh extraction of its file, the saved search indexes loaded and caught up
with the store) and prints what it saw as JSON; the tests here assert on it. Where namespaces or tmpfs mounts are
not allowed the tests skip with the reason, and fail instead under CITERAG_REQUIRE_NAMESPACES=1 (CI).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

DRIVER = Path(__file__).resolve().parent / "disk_driver.py"
NAMESPACES_MISSING = ("cannot mount a tmpfs in a private mount namespace here ({}): the full-disk and read-only "
                      "tests need unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, "
                      "user.max_user_namespaces > 0) or root with CAP_SYS_ADMIN")
PROBE = 'mount -t tmpfs -o size=1m none "$1" && mount -o remount,size=2m none "$1" && mount -o remount,ro none "$1"'


@functools.cache
def namespace_prefix() -> tuple[tuple[str, ...] | None, str]:
    """The command that runs a program in a private mount namespace where it may mount, remount and make
    read-only a tmpfs (tried for real), or None and why not."""
    unshare, mount = shutil.which("unshare"), shutil.which("mount")
    if unshare is None or mount is None:
        return None, "unshare or mount not installed (the full-disk and read-only tests mount a tmpfs in a private " \
                     "mount namespace): apt-get install util-linux mount"
    candidates = [(unshare, "-rm")] + ([(unshare, "-m")] if os.geteuid() == 0 else [])
    reason = ""
    with tempfile.TemporaryDirectory() as folder:
        for prefix in candidates:
            probe = subprocess.run([*prefix, "sh", "-c", PROBE, "sh", folder], capture_output=True, text=True,
                                   timeout=60)
            if probe.returncode == 0:
                return prefix, ""
            reason = reason or (probe.stderr.strip().splitlines() or [f"exit status {probe.returncode}"])[0]
    return None, NAMESPACES_MISSING.format(reason)


def require_namespaces() -> tuple[str, ...]:
    """The namespace prefix; where there is none, skip with the reason, or fail under
    CITERAG_REQUIRE_NAMESPACES=1 (CI, where they are allowed), so that a skip never hides an untested disk."""
    prefix, reason = namespace_prefix()
    if prefix is not None:
        return prefix
    if os.environ.get("CITERAG_REQUIRE_NAMESPACES", "") not in ("", "0"):
        pytest.fail(f"{reason} (and CITERAG_REQUIRE_NAMESPACES is set)", pytrace=False)
    pytest.skip(reason)


def drive(scenario: str, work: Path, timeout: float) -> dict[str, Any]:
    """One scenario of disk_driver.py in its own namespace; what it saw."""
    prefix = require_namespaces()
    done = subprocess.run([*prefix, sys.executable, str(DRIVER), scenario, str(work)], capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"the {scenario} driver failed:\n{done.stderr[-6000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# Scenarios run once per module, and only when a test asks for them.

@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return drive("cli", tmp_path_factory.mktemp("disk-cli"), timeout=900)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return drive("service", tmp_path_factory.mktemp("disk-service"), timeout=600)


@pytest.fixture(scope="module")
def sync(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return drive("sync", tmp_path_factory.mktemp("disk-sync"), timeout=900)


def one_error_line(stderr: list[str], *causes: str) -> str:
    """The one `error:` line a command printed, naming one of `causes`; everything else on stderr is a
    `warning:` line (no traceback, no internal error)."""
    errors = [line for line in stderr if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    assert all(line.startswith(("error: ", "warning: ")) for line in stderr), stderr
    assert "internal error" not in errors[0] and any(cause in errors[0] for cause in causes), errors[0]
    return errors[0]


def assert_intact(seen: dict[str, Any], indexed: int | None = None) -> None:
    """Nothing corrupted: sqlite's integrity check passes on the store and the traces, no document is failed or
    carries an error, every indexed document is whole, and the saved search indexes load (from their own files,
    not rebuilt) and, caught up from the change log, hold exactly the store's chunks."""
    assert seen["integrity"] == {"index.sqlite3": "ok", "traces.sqlite3": "ok"}
    assert seen["failed"] == [] and seen["errors"] == [] and seen["counts"]["failed"] == 0
    assert seen["whole"] == {"checked": seen["counts"]["indexed"], "broken": []}
    if indexed is not None:
        assert seen["counts"]["indexed"] == indexed
    index = seen["search_index"]
    assert index["warnings"] == []
    assert index["manifest"] is False or index["loaded_saved"], index
    assert index["saved_are_committed"] and index["caught_up_equal"], index


def assert_reads(reads: dict[str, Any], warnings: bool = True) -> None:
    """search and ask answered, every quote at its citation's range of an indexed document's text."""
    for command in ("search", "ask"):
        if command in reads:
            read = reads[command]
            assert read["rc"] == 0 and read["quotes_match"], (command, read)
            assert all(line.startswith("warning: ") for line in read["stderr"]) if warnings else not read["stderr"]
    assert reads["status"]["rc"] == 0 and reads["status"]["counts"]["failed"] == 0


# The CLI with the real encoder on a 2 MB disk.

def test_a_full_disk_stops_ingest_with_one_line_and_corrupts_nothing(cli: dict[str, Any]) -> None:
    assert cli["first_ingest"]["rc"] == 0 and cli["first_ingest"]["report"]["indexed"] == 10
    full = cli["full_ingest"]
    assert full["rc"] == 1
    one_error_line(full["stderr"], "database or disk is full")
    seen = cli["full_examine"]
    assert_intact(seen)
    # The disk filled part way: what was committed is whole, at most the document being written is left pending
    # (never `failed`: the disk is not its fault), and the rest was never reached.
    assert 10 < seen["counts"]["indexed"] < 100 and seen["counts"]["pending"] <= 1
    # The search indexes saved after the first ten stayed loadable although saving the next ones failed.
    index = seen["search_index"]
    assert index["loaded_saved"] and index["saved_generation"] < index["store_generation"]
    print(f"2 MB disk full after {seen['counts']['indexed']} of 100 documents indexed "
          f"({seen['counts']['pending']} left pending, 0 failed): {one_error_line(full['stderr'], 'full')}")


def test_search_and_ask_answer_on_the_full_disk(cli: dict[str, Any]) -> None:
    assert_reads(cli["full_reads"])
    assert cli["full_reads"]["ask"]["citations"] > 0


def test_a_writer_cut_off_by_the_full_disk_is_read_on_a_read_only_mount(cli: dict[str, Any]) -> None:
    """The last commits are only in the -wal (the checkpoint had no room) when the mount turns read-only: reads
    go through the -wal and -shm; a copy without the -shm, which SQLite cannot read there, refuses in one line."""
    assert cli["cut_wal"]["wal_bytes"] > 0 and cli["cut_wal"]["shm"]
    assert_reads(cli["cut_reads"])
    assert_intact(cli["cut_examine"], indexed=cli["full_examine"]["counts"]["indexed"])
    refused = cli["cut_no_shm"]
    assert refused["rc"] == 1
    one_error_line(refused["stderr"], "mount it read-write once")


def test_when_space_returns_retry_and_the_same_ingest_complete(cli: dict[str, Any]) -> None:
    pending = cli["full_examine"]["counts"]["pending"]
    retry, rerun = cli["retry"], cli["rerun"]
    assert retry["rc"] == 0 and retry["stderr"] == [] and retry["report"]["indexed"] == pending
    assert retry["report"]["failed"] == []
    assert rerun["rc"] == 0 and rerun["stderr"] == [] and rerun["report"]["failed"] == []
    assert rerun["report"]["indexed"] + rerun["report"]["unchanged"] == 100
    assert rerun["report"]["unchanged"] == cli["full_examine"]["counts"]["indexed"] + pending
    seen = cli["recovered_examine"]
    assert_intact(seen, indexed=100)
    index = seen["search_index"]
    assert index["loaded_saved"] and index["saved_generation"] == index["store_generation"]
    assert index["unnamed_files"] == []  # what the failed saves left was removed by the next save
    assert cli["again"]["rc"] == 0 and cli["again"]["report"]["unchanged"] == 100


def test_a_read_only_index_answers_and_refuses_writes_in_one_line(cli: dict[str, Any]) -> None:
    # Nothing to write: ingest of unchanged files succeeds without touching the mount (not even a lock file).
    unchanged = cli["ro_ingest_unchanged"]
    assert unchanged["rc"] == 0 and unchanged["stderr"] == [] and unchanged["report"]["unchanged"] == 100
    new = cli["ro_ingest_new"]
    assert new["rc"] == 1
    one_error_line(new["stderr"], "read-only file system")
    elsewhere = cli["ro_ingest_new_index"]
    assert elsewhere["rc"] == 1
    one_error_line(elsewhere["stderr"], "Read-only file system")
    assert_reads(cli["ro_reads"])
    assert cli["ro_unchanged"]
    assert_intact(cli["ro_examine"], indexed=100)


def test_read_write_again_the_new_document_is_indexed_and_every_document_is_whole(cli: dict[str, Any]) -> None:
    rw = cli["rw_ingest"]
    assert rw["rc"] == 0 and rw["stderr"] == [] and rw["report"]["indexed"] == 1
    assert rw["report"]["unchanged"] == 100
    seen = cli["final_examine"]
    assert_intact(seen, indexed=101)
    assert seen["counts"]["pending"] == 0
    assert seen["search_index"]["saved_generation"] == seen["search_index"]["store_generation"]
    assert_reads(cli["final_reads"], warnings=False)
    checks = [v for k, v in cli.items() if k.endswith("examine")]
    print(f"{len(checks)} checks of the index on disk passed (integrity, {sum(c['whole']['checked'] for c in checks)}"
          f" documents whole, search indexes loaded and equal to the store); 101 documents indexed at the end")


# In process, with the hash encoder: the disk full at many moments, and index files failing at every step.

def test_the_disk_full_at_many_moments_of_an_ingest(tmp_path: Path) -> None:
    runs = drive("sweep", tmp_path, timeout=600)["runs"]
    assert len(runs) >= 6
    for run in runs:
        assert run["stopped"] is not None, run["size"]  # every size is too small for the 100 documents
        assert run["stopped"].startswith("cannot write the index") and "full" in run["stopped"], run
        assert run["cause"] == "full"  # StoreUnavailable.cause, for an API to map (e.g. to a 507)
        assert_intact(run["examine"])
        assert run["examine"]["counts"]["pending"] <= 1
        assert run["rerun_failed"] == []
        assert_intact(run["final"], indexed=100)
        assert run["final"]["search_index"]["unnamed_files"] == []
    # The sizes stop the run at different documents.
    assert len({run["examine"]["counts"]["indexed"] for run in runs}) == len(runs)
    print("disk full after " + ", ".join(f"{r['examine']['counts']['indexed']} documents ({r['size']})" for r in runs)
          + "; each run completed to 100 once space returned")


def test_search_index_files_failing_mid_save_leave_the_previous_ones_loadable(tmp_path: Path) -> None:
    result = drive("index_files", tmp_path, timeout=600)
    for kind in ("hnsw", "exact"):
        attempts = result[kind]["attempts"]
        failed, last = attempts[:-1], attempts[-1]
        assert last["saved"] and not any(a["saved"] for a in failed), kind
        assert len(failed) >= 10, kind
        for attempt in failed:
            assert attempt["previous_loads"] and attempt["searches"], (kind, attempt)
            assert len(attempt["warnings"]) == 1 and "not saved (No space left on device" in attempt["warnings"][0]
            assert attempt["left_behind"] == []  # a failed save removes what it wrote: no disk filling up with it
        # The disk ran out at every step of the save: appending vectors, then each new file up to the manifest.
        reached = {step for a in failed for step in a["reached"]}
        assert {"exact-rows", "bm25-segment", "bm25-rows", "manifest-tmp"} <= reached, (kind, reached)
        assert any(a["reached"] == [] for a in failed)  # out of room in the vectors file the old state names
        assert kind != "hnsw" or {"hnsw-graph", "hnsw-ids"} <= reached
        assert_intact(result[kind]["examine"], indexed=80)
        after = result[kind]["after_next_save"]
        assert_intact(after, indexed=100)
        assert after["search_index"]["unnamed_files"] == []
        print(f"{kind}: {len(failed)} saves cut short by the disk at {len(reached) + 1} steps, the previous state "
              f"loaded and searched after each; the save with room is loadable")


# `citerag serve` on a small home.

def test_an_upload_on_a_full_disk_is_a_clear_error_and_succeeds_when_space_returns(service: dict[str, Any]) -> None:
    assert service["first"] == {"upload": 202, "settled": "indexed"}
    full = service["full_upload"]
    assert full["status"] == 507, full
    assert "No space left on device" in full["body"]["error"] and "internal error" not in full["body"]["error"]
    assert service["full_originals"] == {"files": 1, "temporary": [], "corrupt": []}  # nothing half written
    assert service["again"]["upload"] == 202 and service["again"]["settled"] == "indexed"


def test_the_service_reads_on_a_full_disk(service: dict[str, Any]) -> None:
    reads = service["full_reads"]
    assert {name: r["status"] for name, r in reads.items()} == dict.fromkeys(reads, 200), reads
    assert reads["search"]["hits"] > 0 and reads["ask"]["citations"] > 0 and not reads["ask_stream"]["error_event"]


def test_indexing_that_meets_a_full_disk_leaves_the_upload_pending_until_retried(service: dict[str, Any]) -> None:
    """Room for the original and its pending row, not for its chunks: the document stays pending, blamed for
    nothing, its original whole; once space returns, retry indexes it."""
    during = service["during_index"]
    assert during["upload"] == 202, during
    assert during["settled"]["status"] == "pending" and during["settled"]["error"] is None
    # A retry while the disk is still full: a clear error (its job cannot be journaled), nothing half written.
    retry = during["full_retry"]
    assert retry["status"] == 507 and "full" in retry["body"]["error"], retry
    assert during["full_retry_settled"] == "pending" and service["jobs_temporary"] == []
    assert service["during_index_originals"]["temporary"] == [] == service["during_index_originals"]["corrupt"]
    assert during["retry"] == 202 and during["after_retry"] == "indexed"
    assert_intact(service["rw_examine"], indexed=3)


def test_a_read_only_home_serves_reads_and_refuses_uploads_clearly(service: dict[str, Any]) -> None:
    reads = service["ro_reads"]
    assert {name: r["status"] for name, r in reads.items()} == dict.fromkeys(reads, 200), reads
    assert reads["search"]["hits"] > 0 and reads["ask"]["citations"] > 0 and not reads["ask_stream"]["error_event"]
    upload = service["ro_upload"]
    assert upload["status"] == 503 and "Read-only file system" in upload["body"]["error"], upload
    assert service["ro_originals"]["temporary"] == [] == service["ro_originals"]["corrupt"]
    assert service["ro_unchanged"]


def test_the_service_recovers_once_the_home_is_writable(service: dict[str, Any]) -> None:
    assert service["rw_upload"] == {"upload": 202, "settled": "indexed"}
    assert_intact(service["final_examine"], indexed=4)
    assert service["final_originals"] == {"files": 4, "temporary": [], "corrupt": []}
    assert service["log_tracebacks"] == 0


# A source's sync (issue 29) onto a full disk, then with room.

def test_a_sync_stopped_by_a_full_disk_loses_nothing_and_the_next_completes(sync: dict[str, Any]) -> None:
    assert sync["add"]["rc"] == 0
    full = sync["full_sync"]
    assert full["rc"] == 1
    one_error_line(full["stderr"], "full")
    seen = sync["full_examine"]
    assert_intact(seen)
    assert 0 < seen["counts"]["indexed"] < 100 and seen["counts"]["pending"] <= 1
    assert full["report"]["complete"] is False and full["report"]["removed"] == 0
    done = sync["sync"]
    assert done["rc"] == 0 and done["report"]["complete"] and done["report"]["error"] is None, done
    assert (done["report"]["added"], done["report"]["unchanged"]) == (100 - seen["counts"]["indexed"],
                                                                      seen["counts"]["indexed"])
    assert_intact(sync["examine"], indexed=100)
    again = sync["again"]["report"]
    assert (again["fetched"], again["added"], again["changed"], again["removed"]) == (0, 0, 0, 0), again
    shown = sync["show"]["report"]
    assert shown["failures"] == 0 and shown["last_error"] is None and shown["documents"] == 100
    print(f"a folder source's sync onto a 2 MB disk: stopped after {seen['counts']['indexed']} of 100 documents "
          f"({one_error_line(full['stderr'], 'full')}); with room the next sync added {done['report']['added']}")
