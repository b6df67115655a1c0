"""citerag's BM25 and chunker against the tools users would otherwise pick, in one run, on the dev set.

    pip install -r benchmarks/requirements.txt && python benchmarks/bench_lexical_and_chunking.py

BM25: index build and 80 dev-set queries over the strategy-E chunks of the 14 HTML chapters, against
rank_bm25 (BM25Okapi) and bm25s. Scores are compared too: only citerag follows the reference formula,
so rank_bm25 and bm25s differ (their idf and tokenisation differ) and the table says by how much.
Chunking: citerag E against LangChain's RecursiveCharacterTextSplitter (512/64) on the same text.
Wall-clock seconds, best of 5 runs; ratios are other / citerag (above 1: citerag is faster).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from citerag.chunk import chunk_extracted
from citerag.extract.html import HtmlExtractor
from citerag.search.bm25 import BM25, tokenize

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "eval" / "debian-reference"


def best_of(fn: Callable[[], object], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    import bm25s
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from rank_bm25 import BM25Okapi

    extracted = [HtmlExtractor().extract(p.read_bytes(), p) for p in sorted((DEV / "corpus").glob("*.html"))]
    docs = [c.text for e in extracted for c in chunk_extracted(e, "E")]
    queries = [json.loads(line)["query"] for line in (DEV / "questions.jsonl").read_text().splitlines()]
    print(f"{len(docs)} chunks, {len(queries)} queries, {sum(len(e.text) for e in extracted):,} characters\n")

    rows = []
    ours = BM25(docs)
    t_ours_build = best_of(lambda: BM25(docs))
    t_ours_query = best_of(lambda: [ours.scores(q) for q in queries])

    tokenized = [tokenize(d) for d in docs]
    okapi = BM25Okapi(tokenized, k1=1.2, b=0.75)
    t_okapi_build = best_of(lambda: BM25Okapi([tokenize(d) for d in docs], k1=1.2, b=0.75))
    t_okapi_query = best_of(lambda: [okapi.get_scores(tokenize(q)) for q in queries], runs=2)

    def build_bm25s() -> bm25s.BM25:
        model = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        model.index([tokenize(d) for d in docs], show_progress=False)
        return model

    fast = build_bm25s()
    vocab = {w for d in tokenized for w in d}
    t_bm25s_build = best_of(build_bm25s)
    t_bm25s_query = best_of(lambda: [fast.get_scores([w for w in tokenize(q) if w in vocab]) for q in queries])

    ref = np.array([ours.scores(q) for q in queries])
    okapi_s = np.array([okapi.get_scores(tokenize(q)) for q in queries])
    bm25s_s = np.array([fast.get_scores([w for w in tokenize(q) if w in vocab]) for q in queries])

    def top1_agree(other: np.ndarray) -> float:
        return float(np.mean(ref.argmax(axis=1) == other.argmax(axis=1)))

    rows.append(("citerag BM25", t_ours_build, t_ours_query, 1.0, 0.0))
    rows.append(("rank_bm25 BM25Okapi", t_okapi_build, t_okapi_query, top1_agree(okapi_s),
                 float(np.max(np.abs(okapi_s - ref)))))
    rows.append(("bm25s (lucene)", t_bm25s_build, t_bm25s_query, top1_agree(bm25s_s),
                 float(np.max(np.abs(bm25s_s - ref)))))
    print("| BM25 | build s | 80 queries s | build ratio | query ratio | top-1 same as reference | max score diff |")
    print("|---|---|---|---|---|---|---|")
    for name, b, q, agree, diff in rows:
        print(f"| {name} | {b:.3f} | {q:.3f} | {b / t_ours_build:.2f} | {q / t_ours_query:.2f} | {agree:.2f} | "
              f"{diff:.3g} |")

    splitter = RecursiveCharacterTextSplitter(chunk_size=512, chunk_overlap=64)
    t_ours_chunk = best_of(lambda: [chunk_extracted(e, "E") for e in extracted])
    t_lc_chunk = best_of(lambda: [splitter.split_text(e.text) for e in extracted])
    n_lc = sum(len(splitter.split_text(e.text)) for e in extracted)
    needles = {json.loads(line)["needle"] for line in (DEV / "questions.jsonl").read_text().splitlines()}

    def whole(chunks: list[str]) -> int:
        flat = [re.sub(r"\s+", " ", c) for c in chunks]
        return sum(any(n in c for c in flat) for n in needles)

    lc_chunks = [c for e in extracted for c in splitter.split_text(e.text)]
    print("\n| chunker | s | chunks | needles kept whole (of 40) | ratio |")
    print("|---|---|---|---|---|")
    print(f"| citerag E | {t_ours_chunk:.3f} | {len(docs)} | {whole(docs)} | 1.00 |")
    print(f"| LangChain RecursiveCharacterTextSplitter 512/64 | {t_lc_chunk:.3f} | {n_lc} | {whole(lc_chunks)} | "
          f"{t_lc_chunk / t_ours_chunk:.2f} |")


if __name__ == "__main__":
    main()
