"""Exact top-k BM25 with pruning (Bm25Index.search, citerag.index.bm25_prune) against full scoring and bm25s.

    .venv/bin/python benchmarks/bench_bm25_pruning.py                        # 200,000 and 1,000,000 rows
    .venv/bin/python benchmarks/bench_bm25_pruning.py --sizes 100000 --k 10,100 --no-bm25s

Rows: the strategy-E chunks of the dev set's 14 HTML chapters, repeated with variations up to N as
bench_scale.py makes them (each copy has three words replaced by words of the corpus vocabulary and ends with
"(copy C, document D)", 50 chunks per document). citerag's index is built as persist builds it (add in batches of
20,000, save), then loaded (memory-mapped). Queries: the dev set's 80 questions. First every query is checked:
the pruned top k equals full scoring's (Rows.best over `scores`: ids, and scores to the bit). Then each query is
timed once per round with each method in turn (the order shuffled per query), for --rounds rounds; a query's
time is its median over the rounds, and p50/p95 are over the queries: wall (perf_counter) and CPU time of this
process (process_time, less disturbed by other processes on a shared machine). bm25s (method lucene, k1 1.2,
b 0.75, the same [a-z0-9]+ tokens, one thread) is what a user would pick instead; ratios: other / pruned.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from citerag.chunk import chunk_extracted
from citerag.extract.html import HtmlExtractor
from citerag.index.bm25 import Bm25Index
from citerag.store.base import ChunkBatch

DEV = Path(__file__).resolve().parent.parent / "eval" / "debian-reference"
WORD = re.compile(r"[A-Za-z]{4,}")
SEED = 20261130


def base_chunks() -> tuple[list[str], list[str], list[str]]:
    """(headers, contents, vocabulary) of the dev set's strategy-E chunks."""
    headers, contents = [], []
    for path in sorted((DEV / "corpus").glob("*.html")):
        for c in chunk_extracted(HtmlExtractor().extract(path.read_bytes(), path), "E"):
            headers.append(c.text[:len(c.text) - len(c.content)])
            contents.append(c.content)
    counts: dict[str, int] = {}
    for text in contents:
        for word in WORD.findall(text):
            counts[word] = counts.get(word, 0) + 1
    return headers, contents, sorted(w for w, n in counts.items() if n >= 2)


def texts(size: int) -> list[str]:
    headers, contents, vocab = base_chunks()
    out = []
    for doc in range(size // 50):
        rng = np.random.default_rng([SEED, 1, doc])
        for g in range(doc * 50, doc * 50 + 50):
            source, copy = g % len(contents), g // len(contents)
            text, spans = contents[source], [m.span() for m in WORD.finditer(contents[source])]
            picked = sorted(rng.choice(len(spans), size=min(3, len(spans)), replace=False).tolist()) if spans else []
            words = [vocab[int(rng.integers(len(vocab)))] for _ in picked]
            for i, word in reversed(list(zip(picked, words, strict=True))):
                text = text[:spans[i][0]] + word + text[spans[i][1]:]
            out.append(f"{headers[source]}{text} (copy {copy}, document {doc})")
    return out


def build(rows: list[str], directory: Path) -> Bm25Index:
    index = Bm25Index()
    for start in range(0, len(rows), 20_000):
        ids = np.arange(start, start + len(rows[start:start + 20_000]), dtype=np.int64)
        index.add(ChunkBatch(ids, ids // 50, rows[start:start + 20_000], np.zeros((len(ids), 0), np.float32)))
    return Bm25Index.load(directory, index.save(directory))


def bm25s_search(rows: list[str]) -> Callable[[str, int], object]:
    import bm25s

    def tokens(t: list[str]) -> object:
        return bm25s.tokenize(t, lower=True, token_pattern=r"[a-z0-9]+", stopwords=None, show_progress=False)
    model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
    model.index(tokens(rows), show_progress=False)

    def search(q: str, k: int) -> object:
        words = bm25s.tokenize([q], lower=True, token_pattern=r"[a-z0-9]+", stopwords=None, return_ids=False,
                               show_progress=False)
        return model.retrieve(words, k=k, show_progress=False, n_threads=1)
    return search


def measure(index: Bm25Index, rows: list[str], queries: list[str], args: argparse.Namespace) -> None:
    methods: dict[str, Callable[[str, int], object]] = {
        "pruned": index.search, "full": lambda q, k: index.rows.best(index.scores(q), k, positive=True)}
    if not args.no_bm25s:
        t = time.perf_counter()
        methods["bm25s"] = bm25s_search(rows)
        print(f"  (bm25s built in {time.perf_counter() - t:.0f} s)", flush=True)
    rows.clear()
    for k in (int(x) for x in args.k.split(",")):
        for q in queries:  # exactness first; bm25s warms up
            (a, sa), (b, sb) = index.search(q, k), index.rows.best(index.scores(q), k, positive=True)
            assert a.tolist() == b.tolist() and np.array_equal(sa, sb), q
            if "bm25s" in methods:
                methods["bm25s"](q, k)
        wall = {m: np.zeros((args.rounds, len(queries))) for m in methods}
        cpu = {m: np.zeros((args.rounds, len(queries))) for m in methods}
        for r in range(args.rounds):
            for i, q in enumerate(queries):
                for m in random.sample(list(methods), len(methods)):
                    w, c = time.perf_counter(), time.process_time()
                    methods[m](q, k)
                    cpu[m][r, i], wall[m][r, i] = time.process_time() - c, time.perf_counter() - w
        print(f"k={k}: all {len(queries)} pruned top-k equal full scoring's (ids and scores, exactly)")
        print(f"  {'ms (median of ' + str(args.rounds) + ' rounds)':<28} {'wall p50':>9} {'p95':>7} "
              f"{'cpu p50':>8} {'p95':>7}  {'wall p50 / pruned':>18}  {'cpu p50 / pruned':>17}")
        median = {m: (np.median(wall[m], axis=0) * 1e3, np.median(cpu[m], axis=0) * 1e3) for m in methods}
        w0, c0 = (float(np.percentile(x, 50)) for x in median["pruned"])
        for m, (wm, cm) in median.items():
            (w50, w95), (c50, c95) = np.percentile(wm, [50, 95]), np.percentile(cm, [50, 95])
            print(f"  {m:<28} {w50:9.2f} {w95:7.2f} {c50:8.2f} {c95:7.2f}  {w50 / w0:17.2f}x  {c50 / c0:16.2f}x",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="200000,1000000")
    parser.add_argument("--k", default="10,100")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-bm25s", action="store_true")
    args = parser.parse_args()
    queries = [json.loads(line)["query"] for line in (DEV / "questions.jsonl").read_text().splitlines()]
    for size in (int(s) for s in args.sizes.split(",")):
        t = time.perf_counter()
        rows = texts(size)
        with tempfile.TemporaryDirectory(prefix="bench-bm25-") as tmp:
            index = build(rows, Path(tmp))
            print(f"=== {size:,} rows ({sum(len(s) for s in index.segments):,} postings, {len(index.segments)} "
                  f"segment(s); made and built in {time.perf_counter() - t:.0f} s) ===", flush=True)
            measure(index, rows, queries, args)


if __name__ == "__main__":
    main()
