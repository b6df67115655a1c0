"""docs/reliability.md stays true: every test it names exists, its crash table is the harness's trials, and its
load figures are the recorded run's (benchmarks/results/load.json, written into the page by the benchmark)."""

from __future__ import annotations

import json
import re
import sys

from crash_harness import DOCUMENTS, TRIALS

from corpus_paths import ROOT

PAGE = ROOT / "docs" / "reliability.md"
sys.path.insert(0, str(ROOT / "benchmarks"))
ENTRY = {"`citerag ingest`": "cli", "`citerag serve`": "service", "`citerag worker`": "worker"}


def test_every_test_the_page_names_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    named, last = [], None
    # `tests/x.py`, `tests/x.py::test_y`, and `::test_z` for another test of the file named last.
    for path, test in re.findall(r"`(tests/[\w/]+\.py|)(?:::(\w+))?`", text):
        if path:
            last = path
        elif not test:
            continue
        assert last is not None, test
        file = ROOT / last
        assert file.exists(), last
        if test:
            assert re.search(rf"^\s*def {test}\(", file.read_text(encoding="utf-8"), re.M), f"{last}::{test}"
        named.append((last, test))
    assert len(named) >= 20


def test_the_crash_table_is_the_harness_trials() -> None:
    text = PAGE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| (SQLite|PostgreSQL) · (`citerag \w+`)[^|]* \| (\d+) \|", text, re.M)
    kills = {(backend.lower().replace("postgresql", "postgres"), ENTRY[entry]): int(n) for backend, entry, n in rows}
    assert kills == {(backend, entry): n for backend, entries in TRIALS.items() for entry, n in entries.items()}
    assert f"Over the {DOCUMENTS}-document folder" in text
    for backend in TRIALS:
        assert sum(TRIALS[backend].values()) >= 20  # the floor per store backend
    assert re.findall(r"^\| (?:SQLite|PostgreSQL) ·(?:[^|]*\|){5} 0 \| 0 \|", text, re.M).__len__() == len(rows)


def test_the_load_figures_are_the_recorded_run() -> None:
    import reliability_page  # benchmarks/: the function the benchmark fills the page with

    recorded = json.loads(reliability_page.RESULT.read_text(encoding="utf-8"))
    shown = reliability_page.cells(PAGE.read_text(encoding="utf-8"))
    assert shown == reliability_page.figures(recorded)
    assert all(run["errors"] == 0 and run["users"] >= 50 and run["seconds"] >= 60
               for run in recorded["runs"].values())
