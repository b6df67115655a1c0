"""Second stages against dense E, on one or more dev sets, in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_second_stage.py eval/debian-reference \
        [eval/postgresql ...] [--cache DIR] [--out results.json] [--reranker DIR[@MAX_LENGTH] ...]

Each DEVSET folder holds corpus/ and questions.jsonl (the format of eval/debian-reference/README.md). Per set,
the strategy-E MiniLM index is built (or reused) under CACHE/<set> with the eval runner's own `build_index`;
dense E (the baseline) retrieves the top 100 per question through the application (`Collection.search`), and
each approach reorders or re-ranks from there:

- maxsim w=W [bare]: dense's top 20 rescored by (1 - W) * chunk cosine + W * best sentence cosine, sentences
  embedded by the same MiniLM behind the chunk's header ("bare": without it); citerag.search.rescore.
- ensemble A+B: RRF (k = 60) of each encoder's dense ranking (top 100) over the same E chunks;
  citerag.search.ensemble. e5 = multilingual-e5-small, use = use-multilingual-v3. Their chunk vectors are
  embedded once and cached under CACHE.
- rerank DIR@L: a cross-encoder folder (e.g. from `citerag train-reranker`) over dense's top 20, read at
  max_length L.

Reported per approach: R@1, R@4, MRR@20 (citerag.eval.metrics), the sign test on reciprocal rank against
dense E (citerag.eval.paired.paired_rr: wins / losses / p), and the latency it ADDS per query (p50, p95 ms;
the baseline row shows the dense search itself). maxsim is timed twice: "cold" embeds every sentence of the
20 chunks for each query (an empty cache), the listed rows use a cache already holding them (what an index-time
sentence store, or a warm LRU cache, would pay). Correctness is the eval's needle rule (the runner's `query_result`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.embed import load_encoder
from citerag.eval.metrics import latency, summary
from citerag.eval.needle import chunk_body
from citerag.eval.paired import paired_rr
from citerag.eval.runner import DEPTH, build_index, corpus_files, query_result
from citerag.eval.truth import Question, load_questions
from citerag.search.ensemble import DenseMatrix, embed_chunks, ensemble_rank
from citerag.search.rerank import CrossEncoderReranker, rerank
from citerag.search.rescore import MaxSimSettings, SentenceVectors, maxsim_rescore
from citerag.settings import Settings
from citerag.text import collapse
from citerag.types import Hit

MINILM = "all-MiniLM-L6-v2"
POOL = 100  # dense hits kept per question: the ensemble fuses rankings this deep
SHORTLIST = 20  # what the rescorers reorder
BASELINE = "dense E"

Ranked = Callable[[Question, list[Hit], np.ndarray], list[int]]  # -> chunk ids, best first


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def chunk_matrix(name: str, ids: list[int], texts: list[str], cache: Path) -> DenseMatrix:
    """Every chunk embedded by `name`, from CACHE when the same texts were embedded before."""
    encoder = load_encoder(name)
    digest = hashlib.sha1("\0".join(texts).encode()).hexdigest()[:16]
    path = cache / f"{name}-{digest}.npy"
    if path.is_file():
        return DenseMatrix(encoder, np.asarray(ids, dtype=np.int64), np.load(path))
    t0 = time.perf_counter()
    matrix = embed_chunks(encoder, ids, texts)
    np.save(path, matrix.vectors)
    log(f"  embedded {len(texts)} chunks with {name} in {time.perf_counter() - t0:.0f}s")
    return matrix


def run_set(folder: Path, cache: Path, exclude: Sequence[str], rerankers: Sequence[str],
            ensembles: Sequence[str], maxsim: bool = True) -> dict[str, Any]:
    questions = load_questions(folder / "questions.jsonl")
    files = corpus_files(folder / "corpus", exclude)
    cache.mkdir(parents=True, exist_ok=True)
    with Citerag() as app:
        _, collection = build_index(app, Settings(), files, cache, MINILM, "E", questions, log)
        chunks, documents = collection.indexed_chunks()
        bodies = {c.id: collapse(chunk_body(c, documents[c.document_id])) for c in chunks}
        app.embed_queries(MINILM, [q.query for q in questions])  # as the eval does: one batch, then cached
        options = SearchOptions(mode="dense", k=POOL, rerank_model="")
        pools: dict[str, list[Hit]] = {}
        base_seconds = []
        for q in questions:
            t0 = time.perf_counter()
            pools[q.id] = collection.search(q.query, options).hits
            base_seconds.append(time.perf_counter() - t0)
        vectors = {q.id: app.query_vector(MINILM, q.query) for q in questions}
        by_id = {c.id: c for c in chunks}

        def ranks_of(order: dict[str, list[int]]) -> dict[str, int | None]:
            out = {}
            for q in questions:
                pool = {h.chunk.id: h for h in pools[q.id]}
                hits = [pool.get(i) or Hit(by_id[i], documents[by_id[i].document_id], 0, 0.0, 1.0)
                        for i in order[q.id][:DEPTH]]
                hits = [Hit(h.chunk, h.document, r + 1, h.score, h.cosine_distance) for r, h in enumerate(hits)]
                out[q.id] = query_result(hits, q, bodies).rank
            return out

        def measure(fn: Ranked) -> tuple[dict[str, list[int]], list[float]]:
            order, seconds = {}, []
            for q in questions:
                t0 = time.perf_counter()
                order[q.id] = fn(q, pools[q.id], vectors[q.id])
                seconds.append(time.perf_counter() - t0)
            return order, seconds

        rows: dict[str, dict[str, Any]] = {}
        base = ranks_of({q.id: [h.chunk.id for h in pools[q.id]] for q in questions})

        def record(name: str, order: dict[str, list[int]], seconds: list[float]) -> None:
            ranks = base if name == BASELINE else ranks_of(order)
            m = summary([ranks[q.id] for q in questions])
            rows[name] = {"recall@1": m["recall@1"].value, "recall@4": m["recall@4"].value, "mrr": m["mrr"].value,
                          "vs_dense_rr": paired_rr(ranks, base), "latency": latency(seconds),
                          "ranks": ranks}
            r, lat = rows[name], rows[name]["latency"]
            log(f"  {name:<34} R@1 {r['recall@1']:.3f} R@4 {r['recall@4']:.3f} MRR {r['mrr']:.3f} "
                f"RR w/l {r['vs_dense_rr']['wins']}/{r['vs_dense_rr']['losses']} p {r['vs_dense_rr']['p']:.4f} "
                f"+{lat['p50_ms']:.1f}/{lat['p95_ms']:.1f} ms")

        record(BASELINE, {}, base_seconds)

        # Sentence max-sim, with and without the header in front of each sentence.
        encoder = load_encoder(MINILM)
        for with_header in (True, False) if maxsim else ():
            tag = "" if with_header else " bare"
            cold_settings = MaxSimSettings(weight=0.5, with_header=with_header)
            t_cold = []
            for q in questions:  # cold: a fresh cache per question
                fresh = SentenceVectors(encoder, cold_settings)
                t0 = time.perf_counter()
                maxsim_rescore(vectors[q.id], pools[q.id][:SHORTLIST], fresh)
                t_cold.append(time.perf_counter() - t0)
            rows[f"maxsim cold{tag} (latency only)"] = {"latency": latency(t_cold)}
            log(f"  maxsim cold{tag}: +{latency(t_cold)['p50_ms']:.0f}/{latency(t_cold)['p95_ms']:.0f} ms")
            warm = SentenceVectors(encoder, cold_settings)
            warm.get([h.chunk for q in questions for h in pools[q.id][:SHORTLIST]])
            for weight in (1.0, 0.7, 0.5, 0.3):
                sv = SentenceVectors(encoder, MaxSimSettings(weight=weight, with_header=with_header))
                sv._cache = warm._cache  # same sentence texts: the weight only changes the mix

                def fn(q: Question, hits: list[Hit], v: np.ndarray, sv: SentenceVectors = sv) -> list[int]:
                    return [h.chunk.id for h in maxsim_rescore(v, hits[:SHORTLIST], sv)]

                record(f"maxsim w={weight}{tag}", *measure(fn))

        # Ensembles of the packaged encoders over the same chunks.
        ids = [c.id for c in chunks]
        texts = [c.text for c in chunks]
        matrices: dict[str, DenseMatrix] = {}
        for combo in ensembles:
            names = combo.split("+")
            for n in names:
                if n != "minilm" and n not in matrices:
                    matrices[n] = chunk_matrix({"e5": "multilingual-e5-small", "use": "use-multilingual-v3"}[n],
                                               ids, texts, cache)
            others = [matrices[n] for n in names if n != "minilm"]
            with_minilm = "minilm" in names

            def fused(q: Question, hits: list[Hit], v: np.ndarray, others: list[DenseMatrix] = others,
                      with_minilm: bool = with_minilm) -> list[int]:
                extra = [[h.chunk.id for h in hits]] if with_minilm else []
                return ensemble_rank(q.query, others, depth=POOL, extra=extra)

            for m in others:  # warm each encoder's first call out of the timings
                ensemble_rank("warm up", [m])
            record(f"ensemble {combo}", *measure(fused))

        for spec in rerankers:
            folder_name, _, length = spec.partition("@")
            model = CrossEncoderReranker(folder_name, max_length=int(length or 256))
            model.score("warm up", ["warm up"])

            def reranked(q: Question, hits: list[Hit], v: np.ndarray, model: CrossEncoderReranker = model) -> list[int]:
                return [h.chunk.id for h in rerank(q.query, hits[:SHORTLIST], model, SHORTLIST)]

            record(f"rerank {Path(folder_name).name}@{length or 256}", *measure(reranked))
    return {"devset": str(folder), "questions": len(questions), "chunks": len(chunks), "rows": rows}


def table(result: dict[str, Any]) -> str:
    head = f"{'approach':<34} {'R@1':>6} {'R@4':>6} {'MRR':>6}  {'RR w/l':>7} {'p':>8}  {'+p50 ms':>8} {'+p95 ms':>8}"
    lines = [f"{result['devset']} ({result['questions']} questions, {result['chunks']} E chunks)", head]
    for name, r in result["rows"].items():
        lat = r["latency"]
        if "mrr" not in r:
            lines.append(f"{name:<34} {'':>37}  {lat['p50_ms']:>8.1f} {lat['p95_ms']:>8.1f}")
            continue
        t = r["vs_dense_rr"]
        wl = "-" if name == BASELINE else f"{t['wins']}/{t['losses']}"
        p = "-" if name == BASELINE else f"{t['p']:.4f}"
        lines.append(f"{name:<34} {r['recall@1']:>6.3f} {r['recall@4']:>6.3f} {r['mrr']:>6.3f}  {wl:>7} {p:>8}  "
                     f"{lat['p50_ms']:>8.1f} {lat['p95_ms']:>8.1f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("devsets", nargs="+", type=Path, help="folders holding corpus/ and questions.jsonl")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/citerag-second-stage"))
    parser.add_argument("--out", type=Path, default=None, help="write every figure (and per-query ranks) here")
    parser.add_argument("--exclude", action="append", default=None, help="corpus globs to leave out (*.pdf)")
    parser.add_argument("--ensembles", default="minilm+e5,minilm+use,minilm+e5+use,e5,use",
                        help="comma-separated encoder sets (minilm, e5, use joined by +); '' for none")
    parser.add_argument("--no-maxsim", action="store_true", help="skip the sentence max-sim rows")
    parser.add_argument("--reranker", action="append", default=[], metavar="DIR[@MAX_LENGTH]")
    args = parser.parse_args(argv)
    exclude = args.exclude if args.exclude is not None else ["*.pdf"]
    ensembles = [e for e in args.ensembles.split(",") if e]
    results = []
    for folder in args.devsets:
        log(f"{folder}:")
        results.append(run_set(folder, args.cache / folder.resolve().name, exclude, args.reranker, ensembles,
                               not args.no_maxsim))
    for r in results:
        print(table(r) + "\n")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
