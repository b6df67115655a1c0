"""The shipped default encoder's end-to-end figures (issue 31), for bench_scale.py: dev-set ingest and a question
from a fresh process, each against what a user would otherwise run.

- `citerag ingest` of the 14 HTML chapters into a new index with the settings' defaults (the shipped encoder,
  whatever it is), in a subprocess, RUNS times: chunks/s of wall time, start-up, extraction, chunking, both
  models and the refusal rule's calibration included. Against: plain sentence-transformers (all-MiniLM-L6-v2,
  its default batch of 32) embedding the very texts citerag embedded (read back from the index), in a fresh
  process, import and load included: what "I'll just encode my chunks" costs before any indexing.
- Each part of a fused default alone, one thread each, on those texts in a fresh process (model loading excluded):
  its seconds and its share of the embedding work (ingest runs the parts side by side when it has cores to).
- `citerag ask` from a fresh process over that index, ASKS times (the first fills the OS page cache and the
  encoders' memory-mapped caches, as any later ask finds them): the median of the others. Against:
  sentence-transformers in a fresh process importing, loading and embedding the one question (no search, no
  answer).

Run alone: `.venv/bin/python benchmarks/default_encoder.py`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "eval" / "debian-reference" / "corpus"
QUESTION = "systemctl status shows a red dot in front of my service. What does it mean?"  # the README's
RUNS, ASKS = 3, 4
ST_ENCODE = ("import json, sys, time\nt = time.perf_counter()\n"
             "from citerag.embed.sentence_transformer import SentenceTransformerEncoder\n"
             "texts = json.load(open(sys.argv[1]))\n"
             "SentenceTransformerEncoder('all-MiniLM-L6-v2').encode(texts)\n"
             "print(time.perf_counter() - t)\n")

PART_ENCODE = ("import json, sys, time\nfrom citerag.embed import load_encoder\n"
               "texts = json.load(open(sys.argv[1]))\nencoder = load_encoder(sys.argv[2], 1)\n"
               "encoder.encode(texts[:8])\nt = time.perf_counter()\nencoder.encode(texts)\n"
               "print(time.perf_counter() - t)\n")


def part_seconds(model: str, texts_file: Path) -> dict[str, float]:
    """Each part of a fused `model` (itself when not fused) encoding the texts alone on one thread."""
    from citerag.embed.fused import part_names

    out = {}
    for part in part_names(model) or [model]:
        proc = subprocess.run([sys.executable, "-c", PART_ENCODE, str(texts_file), part], capture_output=True,
                              text=True, timeout=1800, check=True, env=_env())
        out[part] = float(proc.stdout.split()[-1])
    return out


def _cli() -> str:
    return str(Path(sys.executable).with_name("citerag"))


def _env() -> dict[str, str]:
    # The shipped default, not whatever the caller's environment chose (bench_scale sets MiniLM for its own data).
    return {k: v for k, v in os.environ.items() if k != "CITERAG_EMBEDDING_MODEL"}


def _wall(argv: list[str], timeout: float) -> float:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, env=_env())
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv[:2])} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def measure(work: Path | None = None) -> dict[str, Any]:
    """Ingest RUNS times and ask ASKS times with the default encoder; sentence-transformers on the same texts."""
    tmp = Path(tempfile.mkdtemp(prefix="citerag-bench-default-", dir=work))
    files = sorted(str(p) for p in CORPUS.glob("*.html"))
    load = os.getloadavg()[0]
    ingest_s: list[float] = []
    for run in range(RUNS):
        index = tmp / f"index-{run}"
        ingest_s.append(_wall([_cli(), "ingest", *files, "--index", str(index)], 1800))
    status = subprocess.run([_cli(), "status", "--index", str(index), "--json"], capture_output=True, text=True,
                            timeout=120, check=True, env=_env())
    documents = json.loads(status.stdout)["documents"]
    chunks = sum(d["chunk_count"] for d in documents)
    model = str(documents[0]["stamps"]["embedding_model"])  # what the index was built with: the default
    asks = [_wall([_cli(), "ask", "--index", str(index), QUESTION], 300) for _ in range(ASKS)]

    db = sqlite3.connect(index / "index.sqlite3")
    texts = [row[0] for row in db.execute("SELECT text FROM chunks ORDER BY id")]
    db.close()
    (tmp / "texts.json").write_text(json.dumps(texts))
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", ST_ENCODE, str(tmp / "texts.json")], capture_output=True, text=True,
                          timeout=1800, check=True)
    st_ingest = time.perf_counter() - started
    st_inside = float(proc.stdout.split()[-1])
    parts = part_seconds(model, tmp / "texts.json")

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_query_embedding import fresh_process

    st_ask = fresh_process("sentence-transformers")[2]
    for child in sorted(tmp.rglob("*"), reverse=True):  # the indexes are a few MB each; nothing is kept
        child.rmdir() if child.is_dir() else child.unlink()
    tmp.rmdir()
    ingest = statistics.median(ingest_s)
    return {"model": model, "chunks": chunks, "load_at_start": load, "ingest_s": ingest_s,
            "ingest_rate": chunks / ingest, "st_encode_s": st_ingest, "st_encode_inside_s": st_inside,
            "ingest_ratio": ingest / st_ingest, "ask_s": asks, "ask_median_s": statistics.median(asks[1:]),
            "st_fresh_query_s": st_ask, "parts_s": parts, "load_at_end": os.getloadavg()[0]}


def report(r: dict[str, Any]) -> list[str]:
    """Lines for the printed report."""
    runs = ", ".join(f"{s:.1f}" for s in r["ingest_s"])
    asks = ", ".join(f"{s:.2f}" for s in r["ask_s"])
    return [
        f"[8] the shipped default encoder ({r['model']}) on the {r['chunks']:,}-chunk dev set "
        f"(load average {r['load_at_start']:.1f} at the start, {r['load_at_end']:.1f} at the end)",
        f"  ingest: {r['ingest_rate']:.1f} chunks/s (median of {len(r['ingest_s'])}: {runs} s wall); "
        f"sentence-transformers MiniLM embedding the same texts in a fresh process: {r['st_encode_s']:.1f} s "
        f"(time ratio citerag / sentence-transformers {r['ingest_ratio']:.2f})",
        "  embedding work by part (alone, one thread, all chunks): " + ", ".join(
            f"{name} {sec:.1f} s ({sec / sum(r['parts_s'].values()):.0%})" for name, sec in r["parts_s"].items()),
        f"  fresh-process ask: {r['ask_median_s']:.2f} s (median of runs 2-{len(r['ask_s'])}; all: {asks} s); "
        f"sentence-transformers importing, loading and embedding one question: {r['st_fresh_query_s']:.2f} s",
    ]


if __name__ == "__main__":
    print("\n".join(report(measure())))
