"""The load test's figures in docs/reliability.md: each `<!-- measured: KEY -->` cell, from a bench_load.py result.

bench_load.py writes them after a run; tests/reliability/test_reliability_doc.py checks the page against the
recorded result (benchmarks/results/load.json) with the same function, so the page cannot drift from the run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reliability.md"
RESULT = ROOT / "benchmarks" / "results" / "load.json"


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def figures(result: dict[str, Any]) -> dict[str, str]:
    out = {"run": f"{result['date']}, {result['users']} users for {result['seconds']:g} s per run, "
                  f"{result['machine']['cores']} cores."}
    for label, run in result["runs"].items():
        latency, ingestion = run["latency"], run["ingestion"]
        out[f"{label}.requests"] = f"{run['requests']:,}"
        out[f"{label}.errors"] = str(run["errors"])
        out[f"{label}.p50"] = _ms(latency["p50_ms"])
        out[f"{label}.p95"] = _ms(latency["p95_ms"])
        out[f"{label}.p99"] = _ms(latency["p99_ms"])
        out[f"{label}.throughput"] = f"{run['throughput_rps']:g} requests/s"
        out[f"{label}.ingestion"] = (f"{ingestion['statuses'].get('indexed', 0)} of {ingestion['documents']} indexed "
                                     f"after {ingestion['settled_s']:g} s"
                                     + (" (within the run)" if ingestion["finished_during_run"] else
                                        " (after the run; indexing throughout it)"))
        out[f"{label}.citations"] = f"{run['citations']['checked']} checked, {len(run['citations']['invalid'])} wrong"
    return out


def cells(text: str) -> dict[str, str]:
    """KEY -> the value after its marker, up to the cell's end (" |")."""
    return {k: v.strip() for k, v in re.findall(r"<!-- measured: ([a-z0-9_.]+) -->([^|\n]*)", text)}


def fill(result: dict[str, Any], page: Path = PAGE) -> None:
    text = page.read_text(encoding="utf-8")
    for key, value in figures(result).items():
        text, found = re.subn(rf"(<!-- measured: {re.escape(key)} -->)[^|\n]*", rf"\1 {value} ", text)
        if not found:
            raise SystemExit(f"{page} has no <!-- measured: {key} --> marker for {value!r}")
    page.write_text(re.sub(r" +$", "", re.sub(r" +\|", " |", text), flags=re.M), encoding="utf-8")
