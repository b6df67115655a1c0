"""Issue 31's figures in bench_scale.py's run: the shipped default encoder end to end (default_encoder.py) and BM25 on
PostgreSQL at 100k chunks (bench_pg_bm25.py, in a subprocess: it starts its own embedded PostgreSQL), then one
verdict per target beside what a user would run instead. The cached answer over HTTP is bench_load.py's (a
server under load is its business): its line here says where to read it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
PG_CHUNKS = 100_000


def pg_bm25(data: Path, rounds: int = 3) -> dict[str, Any]:
    """bench_pg_bm25.py at PG_CHUNKS (its data kept under `data`, loaded once: about two minutes)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "pg.json"
        proc = subprocess.run([sys.executable, str(HERE / "bench_pg_bm25.py"), "--chunks", str(PG_CHUNKS),
                               "--rounds", str(rounds), "--data", str(data / "pg-bm25"), "--json", str(out)],
                              capture_output=True, text=True, timeout=3600, check=False)
        if proc.returncode or not out.exists():
            return {"skipped": f"bench_pg_bm25.py exited {proc.returncode}: {proc.stderr.strip()[-400:]}"}
        figures: dict[str, Any] = json.loads(out.read_text())
        return figures


def _ms(times: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(times) * 1000, q))


def report(results: dict[int, dict[str, Any]], default: dict[str, Any] | None, pg: dict[str, Any] | None) -> None:
    """The issue-31 target lines (after bench_scale's own)."""
    sys.path.insert(0, str(HERE))
    import default_encoder

    print("\n=== issue 31 ===")
    if default is not None:
        print("\n".join(default_encoder.report(default)))
    if pg is not None and "skipped" not in pg:
        print(f"[9] BM25 on PostgreSQL, {pg['chunks']:,} chunks, {pg['questions']} dev questions, k 10, median of "
              f"{pg['rounds']} rounds (bench_pg_bm25.py): " + "; ".join(
                  f"{name} p50 {f['p50_ms']:.1f} / p95 {f['p95_ms']:.1f} ms" for name, f in pg.items()
                  if isinstance(f, dict)))

    def line(ok: bool, text: str) -> None:
        print(f"  {'met   ' if ok else 'MISSED'}  {text}")

    print("\n=== issue 31 targets ===")
    if default is not None:
        line(default["ask_median_s"] <= 1.0, f"fresh-process `citerag ask` with {default['model']}: "
             f"{default['ask_median_s']:.2f} s (≤ 1 s; sentence-transformers loading and embedding one question "
             f"{default['st_fresh_query_s']:.2f} s)")
        line(default["ingest_rate"] >= 45, f"dev-set ingest with {default['model']}: {default['ingest_rate']:.1f} "
             f"chunks/s (≥ 45)")
        line(default["ingest_ratio"] <= 0.8, f"ingest time / sentence-transformers MiniLM encoding the same texts "
             f"in a fresh process: {default['ingest_ratio']:.2f} (≤ 0.8)")
    big = results.get(1_000_000)
    if big is not None and "times" in big["lexical"].get("citerag", {}):
        lexical = big["lexical"]
        ours = _ms(lexical["citerag"]["times"], 50)
        peers = "; ".join(f"{name} {_ms(lexical[name]['times'], 50):.1f} ms" if "times" in lexical.get(name, {})
                          else f"{name} {lexical.get(name, {}).get('skipped', 'not run')}"
                          for name in ("bm25s", "rank_bm25"))
        line(ours <= 15, f"BM25 at 1M chunks, p50: {ours:.1f} ms (≤ 15 ms; {peers})")
    else:
        print("  n/a     BM25 at 1M chunks: the 1,000,000 size was not run")
    if pg is not None and "skipped" not in pg:
        now, before, fts = pg["segments (now)"], pg["rows (before)"], pg["full-text ts_rank"]
        line(now["p50_ms"] <= 20, f"BM25 on PostgreSQL at {pg['chunks']:,} chunks, p50: {now['p50_ms']:.1f} ms "
             f"(≤ 20 ms; p95 {now['p95_ms']:.1f}; the rows layout before {before['p50_ms']:.1f} ms; PostgreSQL's "
             f"full-text ts_rank {fts['p50_ms']:.1f} ms)")
    elif pg is not None:
        line(False, f"BM25 on PostgreSQL: {pg['skipped']}")
    if big is not None and "add_wait" in big:
        wait = big["add_wait"]
        line(wait["worst_s"] <= 1.0, f"the slowest add at 1M with the HNSW graph rebuilt in the background: "
             f"{wait['worst_s']:.2f} s (≤ 1 s; the new graph adopted after {wait['adopted_s']:.1f} s)")
    print("  (see bench_load.py) a cached answer over HTTP with traces kept: ≤ 5 ms p50, warm throughput ×2")
