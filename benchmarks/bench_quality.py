"""Retrieval quality on both dev sets, in one run: citerag's shipped default against what a user would
otherwise pick (LangChain's RecursiveCharacterTextSplitter 1000/200 with the same encoder, dense), and the
fusion rules tried for natural-language questions, each with the paired sign test on reciprocal rank.

    pip install -r benchmarks/requirements.txt
    python benchmarks/bench_quality.py [eval/debian-reference eval/postgresql] [--cache DIR]

Correct = a returned chunk holds the whitespace-collapsed needle (the dev sets' rule); ranks over the top 20.
Writes benchmarks/results/quality.json; docs/quality.md reports it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from citerag.app.files import extract_file
from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.eval.devset import dev_set
from citerag.eval.metrics import summary
from citerag.eval.needle import chunk_body
from citerag.eval.paired import paired_rr
from citerag.eval.runner import corpus_files
from citerag.eval.truth import Question, load_questions
from citerag.settings import Settings
from citerag.text import collapse

ROOT = Path(__file__).resolve().parent.parent
SETS = [ROOT / "eval" / "debian-reference", ROOT / "eval" / "postgresql"]
DEPTH = 20
MODEL = "all-MiniLM-L6-v2"
Ranks = dict[str, int | None]


def first_correct(ranked: Sequence[str], needle: str) -> int | None:
    want = collapse(needle)
    return next((i + 1 for i, text in enumerate(ranked[:DEPTH]) if want in collapse(text)), None)


def langchain_ranks(app: Citerag, files: Sequence[Path], questions: Sequence[Question]) -> tuple[Ranks, int]:
    """RecursiveCharacterTextSplitter(1000, 200) over the same canonical texts, MiniLM, dense: ranks and the
    number of needles no chunk holds whole (destroyed answers)."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
    chunks = [c for f in files for c in splitter.split_text(extract_file(f).text)]
    encoder = app.encoder(MODEL)
    vectors = encoder.encode(chunks)
    queries = app.embed_queries(MODEL, [q.query for q in questions])
    ranks: Ranks = {}
    for q, v in zip(questions, queries, strict=True):
        order = np.argsort(-(vectors @ v), kind="stable")[:DEPTH]
        ranks[q.id] = first_correct([chunks[i] for i in order], q.needle)
    bodies = {collapse(c) for c in chunks}
    destroyed = sum(not any(collapse(q.needle) in b for b in bodies) for q in {q.truth: q for q in questions}.values())
    return ranks, destroyed


def fused(dense: Sequence[Any], lexical: Sequence[Any], rule: Callable[[dict[int, float], dict[int, float]],
                                                                          dict[int, float]]) -> list[Any]:
    """Hits of both lists ordered by `rule(cosine similarity by chunk, BM25 score by chunk)`."""
    hits = {h.chunk.id: h for h in [*dense, *lexical]}
    similarity = {i: 1.0 - h.cosine_distance for i, h in hits.items()}  # exact for BM25-only hits too
    bm25 = {h.chunk.id: h.score for h in lexical}
    score = rule(similarity, bm25)
    return [hits[i] for i in sorted(hits, key=lambda i: -score[i])]


def score_fusion(alpha: float) -> Callable[[dict[int, float], dict[int, float]], dict[int, float]]:
    """Cosine similarity + alpha x BM25 score relative to the query's best BM25 score."""
    def rule(sim: dict[int, float], bm25: dict[int, float]) -> dict[int, float]:
        top = max(bm25.values(), default=0.0) or 1.0
        return {i: s + alpha * bm25.get(i, 0.0) / top for i, s in sim.items()}
    return rule


def weighted_rrf(weight: float, k: int = 60) -> Callable[[dict[int, float], dict[int, float]], dict[int, float]]:
    """RRF with the BM25 list weighted by `weight` against dense's 1."""
    def rule(sim: dict[int, float], bm25: dict[int, float]) -> dict[int, float]:
        dense_rank = {i: r for r, i in enumerate(sorted(sim, key=lambda i: -sim[i]))}
        lexical_rank = {i: r for r, i in enumerate(sorted(bm25, key=lambda i: -bm25[i]))}
        return {i: 1 / (k + dense_rank[i] + 1) + (weight / (k + lexical_rank[i] + 1) if i in lexical_rank else 0)
                for i in sim}
    return rule


ATTEMPTS = {"score fusion a=0.1": score_fusion(0.1), "score fusion a=0.2": score_fusion(0.2),
            "score fusion a=0.3": score_fusion(0.3), "weighted RRF w=0.3": weighted_rrf(0.3),
            "weighted RRF w=0.5": weighted_rrf(0.5)}


def measure(app: Citerag, folder: Path, cache: Path) -> dict[str, Any]:
    found = dev_set(folder)
    files = corpus_files(found.corpus, found.exclude)
    questions = load_questions(found.questions)
    settings = Settings().with_changes(index_dir=(cache / folder.name).resolve(), collection=folder.name)
    collection = app.open_collection(settings, create=True)
    collection.ingest(files)
    chunks, documents = collection.indexed_chunks()
    body = {c.id: chunk_body(c, documents[c.document_id]) for c in chunks}

    def ranks_of(order: Callable[[Question], Sequence[Any]]) -> Ranks:
        return {q.id: first_correct([body[h.chunk.id] for h in order(q)], q.needle) for q in questions}

    runs: dict[str, Ranks] = {
        "citerag default (E, adaptive)": ranks_of(lambda q: collection.search(q.query, SearchOptions(k=DEPTH)).hits),
        "dense E": ranks_of(lambda q: collection.search(q.query, SearchOptions(mode="dense", k=DEPTH)).hits)}
    lists = {q.id: (collection.search(q.query, SearchOptions(mode="dense", k=100)).hits,
                    collection.search(q.query, SearchOptions(mode="bm25", k=100)).hits) for q in questions}
    for name, rule in ATTEMPTS.items():
        runs[name] = ranks_of(lambda q, rule=rule: fused(*lists[q.id], rule))  # type: ignore[misc]
    runs["LangChain recursive 1000/200, dense"], lc_destroyed = langchain_ranks(app, files, questions)
    default = runs["citerag default (E, adaptive)"]
    rows = {}
    for name, ranks in runs.items():
        m = summary(list(ranks.values()))
        versus = "LangChain recursive 1000/200, dense" if name.startswith("citerag") else "dense E"
        rows[name] = {**{k: m[k].as_json() for k in ("recall@1", "recall@4", "mrr")},
                      "versus": versus if name != versus and name != "dense E" else None,
                      "paired_rr": paired_rr(ranks, runs[versus]) if name not in (versus, "dense E") else None}
    rows["LangChain recursive 1000/200, dense"]["destroyed"] = lc_destroyed
    rows["citerag default (E, adaptive)"]["paired_rr_vs_dense"] = paired_rr(default, runs["dense E"])
    return {"dev_set": folder.name, "questions": len(questions), "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", type=Path, default=SETS)
    parser.add_argument("--cache", type=Path, default=ROOT / ".bench-quality")
    args = parser.parse_args()
    with Citerag() as app:
        results = [measure(app, folder, args.cache) for folder in args.sets]
    for r in results:
        print(f"\n{r['dev_set']} ({r['questions']} questions)\n")
        print("| retrieval | R@1 | R@4 | MRR | paired RR (wins:losses, p) against |")
        print("|---|---|---|---|---|")
        for name, row in r["rows"].items():
            t = row["paired_rr"]
            against = f"{t['wins']}:{t['losses']}, p = {t['p']:.3g} vs {row['versus']}" if t else "-"
            print(f"| {name} | {row['recall@1']['value']:.3f} | {row['recall@4']['value']:.3f} | "
                  f"{row['mrr']['value']:.3f} | {against} |")
    out = ROOT / "benchmarks" / "results" / "quality.json"
    out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
