"""Does a refusal's timing tell a caller that a document it may not read holds the answer? Issue 30 asks that a
question answered only by a hidden document be refused "as if it did not exist": the same text and, beyond noise,
the same time.

    .venv/bin/python benchmarks/bench_refusal_timing.py              # 100 rounds (about a minute)
    .venv/bin/python benchmarks/bench_refusal_timing.py --rounds 5   # a quick look

Two collections in one temporary home, ingested with the default settings and encoder: "hidden" holds the dev
corpus's chapters 3, 4 and 6, chapter 3 readable by the group `sre` only and chapter 6 by `hr` only (`citerag
restrict`); "absent" holds chapters 4 and 6 (for `hr`), so that both collections take the same filtered path and
differ only in chapter 3. The caller is a reader of no group (Filters.audience = {}: chapter 4 only), through
`Collection.ask` (the question path every route takes). Questions: the dev set's whose answer is in chapter 3 (each
refused for this caller in both collections, or the run stops). The answer and retrieval caches are off, so every
ask retrieves; the query-embedding cache stays on (after the warm-up round no ask embeds), so that only what the
collections hold differs. Each round asks every question in both collections, the order of the two alternating by round.

Reported: each collection's p50 and p95 over all asks, the median of the paired differences (hidden - absent, the
same question and round), and the Wilcoxon signed-rank test's p-value on them (scipy): a small p says the hidden
document's presence is measurable in time. Also checked: the two refusals are the same answer (JSON; timings, trace
ids and the calibrated cut aside: each collection's rule is fitted on all of its chunks, see docs/security.md's
gaps). Writes benchmarks/results/refusal_timing.json (or --json) and prints a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import wilcoxon

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_filtered import finish  # noqa: E402 - the benchmarks folder is not a package
from bench_scale import cpu_mark, note, others_since, table  # noqa: E402

from citerag.app.home import Citerag  # noqa: E402
from citerag.app.models import AskOptions, Filters  # noqa: E402
from citerag.settings import Settings  # noqa: E402

DEV = HERE.parent / "eval" / "debian-reference"
RESULTS = HERE / "results" / "refusal_timing.json"
ROUNDS = 100
NO_CACHES = {"cache_answer_ttl": 0, "cache_retrieval_ttl": 0}


def comparable(answer: Any) -> dict[str, Any]:
    """The refusal but its cut: each collection's calibrated rule is fitted on all its chunks, hidden ones included
    (the refusal text names the cut), so the two collections' cuts differ; timings and trace ids aside too."""
    data = dataclasses.asdict(answer)
    return {k: v for k, v in data.items() if k not in ("timings", "trace_id", "cache", "threshold", "answer")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", type=Path, default=RESULTS)
    args = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()[0]
    questions = [q["query"] for q in map(json.loads, (DEV / "questions.jsonl").read_text().splitlines())
                 if q["source"] == "ch03.en.html"]
    reader = AskOptions(filters=Filters().seen_by(frozenset()))
    with tempfile.TemporaryDirectory(prefix="citerag-bench-refusal-") as tmp:
        home = Path(tmp)
        with Citerag.open_home(Settings(index_dir=home, **NO_CACHES)) as app:
            note("ingest: hidden (ch03 for sre, ch04, ch06 for hr), absent (ch04, ch06 for hr)")
            app.create_collection("hidden", {})
            app.create_collection("absent", {})
            corpus = DEV / "corpus"
            app.collection("hidden").ingest([corpus / "ch03.en.html", corpus / "ch04.en.html", corpus / "ch06.en.html"])
            app.collection("absent").ingest([corpus / "ch04.en.html", corpus / "ch06.en.html"])
            hidden, absent = app.collection("hidden"), app.collection("absent")
            for collection, name, group in ((hidden, "ch03.en.html", "sre"), (hidden, "ch06.en.html", "hr"),
                                            (absent, "ch06.en.html", "hr")):
                doc = next(d for d in collection.documents() if d.name == name)
                assert collection.store.set_groups(doc.id, [group])
            refused = [q for q in questions if hidden.ask(q, reader).refused]
            note(f"{len(refused)} of {len(questions)} chapter-3 questions refused for the reader")
            for q in refused:  # the same refusal in both: else the timing compares different work
                same = comparable(hidden.ask(q, reader)) == comparable(absent.ask(q, reader))
                if not same:
                    a, b = comparable(hidden.ask(q, reader)), comparable(absent.ask(q, reader))
                    raise SystemExit(f"the refusal of {q!r} differs between the collections: "
                                     f"{ {k: (a[k], b[k]) for k in a if a[k] != b[k]} }")
            times: dict[str, list[list[float]]] = {"hidden": [], "absent": []}
            mark = cpu_mark()
            for r in range(args.rounds):
                order = [("hidden", hidden), ("absent", absent)][:: 1 if r % 2 == 0 else -1]
                took: dict[str, list[float]] = {"hidden": [], "absent": []}
                for q in refused:
                    for name, collection in order:
                        t = time.perf_counter()
                        collection.ask(q, reader)
                        took[name].append(time.perf_counter() - t)
                for name in took:
                    times[name].append(took[name])
            others = others_since(mark)
    h, a = np.asarray(times["hidden"]) * 1000, np.asarray(times["absent"]) * 1000
    diff = (h - a).ravel()
    test = wilcoxon(diff)
    result = {"made": datetime.now(UTC).isoformat(timespec="seconds"), "questions": len(refused),
              "rounds": args.rounds, "asks_per_collection": int(h.size), "cpus": os.cpu_count(),
              "machine": platform.platform(), "load_average": load, "others_cpus": others,
              **{f"{name}_p{p}_ms": round(float(np.percentile(x, p)), 3) for name, x in (("hidden", h), ("absent", a))
                 for p in (50, 95)},
              "median_difference_ms": round(float(np.median(diff)), 3), "wilcoxon_p": float(test.pvalue),
              "refusals_identical": True}

    def report(result: dict[str, Any]) -> None:
        print(f"\nrefusal timing: {result['questions']} chapter-3 questions x {result['rounds']} rounds per "
              f"collection, caches off but the query vectors'; {result['cpus']} CPUs, other processes kept "
              f"{result['others_cpus']:.2f} CPUs busy; refusals identical: {result['refusals_identical']}")
        table(["collection", "p50 ms", "p95 ms"],
              [("hidden (ch03 unreadable)", result["hidden_p50_ms"], result["hidden_p95_ms"]),
               ("absent (no ch03)", result["absent_p50_ms"], result["absent_p95_ms"])], first=26)
        print(f"median paired difference (hidden - absent): {result['median_difference_ms']} ms; Wilcoxon "
              f"signed-rank p = {result['wilcoxon_p']:.3g}")

    finish(result, started, args.json, report)


if __name__ == "__main__":
    main()
