"""Leave-one-set-out: the adaptive ranking's two values (the lexical weight, the English-only model's share for a
question not in English) fitted on every dev set but the one judged, for each set in turn (docs/quality.md).

    python scripts/retrieval_loso.py [--cache DIR]

For each set, every question's score against every chunk is computed once from the real indexes (the default
encoder and tokenisation): each packaged model's cosine (a fused vector's blocks), BM25, the question's idf mass.
Each candidate rule is then a formula over those matrices. A held-out set's relatives (sets sharing its corpus or
its questions: the Debian Reference in both languages and both crossings, XQuAD's three) are left out of its fit
too, so no fit ever saw the held-out set's text or questions. The fit maximises the mean MRR over the sets it
sees; the figures printed for a set are those of the values chosen without it, paired (sign test on reciprocal
rank) against the dense ranking shipped before (the index's own cosine). The rivals (RRF, BM25 relative to the
question's best BM25 score, BM25 alone) are measured on every set. Writes benchmarks/results/retrieval_loso.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from citerag.app.home import Citerag
from citerag.app.query import open_retriever
from citerag.embed.fused import DIMS, ENGLISH_ONLY, part_names
from citerag.eval.devset import dev_set
from citerag.eval.metrics import mrr, recall_at
from citerag.eval.needle import chunk_body
from citerag.eval.paired import paired_rr
from citerag.eval.runner import corpus_files
from citerag.eval.truth import load_questions
from citerag.lang import detect
from citerag.settings import Settings
from citerag.text import collapse

ROOT = Path(__file__).resolve().parent.parent
SETS = ["debian-reference", "postgresql", "debian-reference-de", "debian-reference-de-en", "debian-reference-en-de",
        "xquad-en", "xquad-de", "xquad-de-en"]
FAMILIES = [{"debian-reference", "debian-reference-de", "debian-reference-de-en", "debian-reference-en-de"},
            {"postgresql"}, {"xquad-en", "xquad-de", "xquad-de-en"}]
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.6)
SHARES = (0.1, 0.2, 0.3, 0.4, 0.5)
DEPTH = 20


@dataclass
class Scores:
    """One set's questions against every chunk of its corpus."""

    ids: list[str]
    english: np.ndarray  # (questions,) bool: detected as English
    cosines: list[np.ndarray]  # per packaged model: (questions, chunks)
    english_only: list[bool]  # per packaged model
    bm25: np.ndarray  # (questions, chunks)
    mass: np.ndarray  # (questions,)
    correct: np.ndarray  # (questions, chunks) bool: the chunk holds the needle


def collect(app: Citerag, name: str, cache: Path, opened: dict[str, Any]) -> Scores:
    found = dev_set(ROOT / "eval" / name)
    corpus = found.corpus.resolve()
    if str(corpus) not in opened:
        settings = Settings().with_changes(index_dir=cache / corpus.parent.name, collection=corpus.parent.name)
        collection = app.open_collection(settings, create=True)
        collection.ingest(corpus_files(found.corpus, found.exclude))
        opened[str(corpus)] = collection
    collection = opened[str(corpus)]
    model = collection.settings.embedding_model
    names = part_names(model) or [model]
    chunks, documents = collection.indexed_chunks()
    chunk_ids = np.array([c.id for c in chunks], dtype=np.int64)
    bodies = [collapse(chunk_body(c, documents[c.document_id])) for c in chunks]
    questions = load_questions(found.questions)
    vectors = app.embed_queries(model, [q.query for q in questions])
    with open_retriever(collection) as retriever:
        vector, lexical = retriever.vector, retriever.lexical
        assert vector is not None
        cosines = [np.zeros((len(questions), len(chunks))) for _ in names]
        bm25 = np.zeros((len(questions), len(chunks)))
        where = {int(c): j for j, c in enumerate(chunk_ids)}
        starts = np.cumsum([0, *(DIMS.get(n, vector.dim) for n in names)])
        for i, (q, v) in enumerate(zip(questions, vectors, strict=True)):
            for m in range(len(names)):  # a block's dot product is 1/n of that model's cosine
                block = np.zeros_like(v)
                block[starts[m]:starts[m + 1]] = v[starts[m]:starts[m + 1]]
                cosines[m][i] = len(names) * vector.similarity(block, chunk_ids)
            found_ids, found_scores = lexical.search(q.query, len(chunk_ids))
            for c, s in zip(found_ids.tolist(), found_scores.tolist(), strict=True):
                bm25[i, where[c]] = s
        mass = np.array([lexical.query_mass(q.query) for q in questions])
    correct = np.array([[collapse(q.needle) in b for b in bodies] for q in questions], dtype=bool)
    return Scores([q.id for q in questions], np.array([detect(q.query) == "en" for q in questions]), cosines,
                  [n in ENGLISH_ONLY for n in names], bm25, mass, correct)


def cosine(s: Scores, share: float) -> np.ndarray:
    """The models' cosines, an equal share each for English questions, `share` for the English-only models
    otherwise (a single model, or no English-only part: its own cosine)."""
    n = len(s.cosines)
    if n == 1 or all(s.english_only) or not any(s.english_only):
        return sum(s.cosines) / n
    k = sum(s.english_only)
    out = np.zeros_like(s.cosines[0])
    for c, only in zip(s.cosines, s.english_only, strict=True):
        foreign = share / k if only else (1 - share) / (n - k)
        out += np.where(s.english[:, None], 1 / n, foreign) * c
    return out


def adaptive(weight: float, share: float) -> Callable[[Scores], np.ndarray]:
    def rule(s: Scores) -> np.ndarray:
        return cosine(s, share) + weight * s.bm25 / np.maximum(s.mass, 1e-12)[:, None]
    return rule


def relative(weight: float) -> Callable[[Scores], np.ndarray]:
    """BM25 relative to the question's best BM25 score: 1 for the best chunk however weak the match."""
    def rule(s: Scores) -> np.ndarray:
        return cosine(s, 0.5) + weight * s.bm25 / np.maximum(s.bm25.max(axis=1, keepdims=True), 1e-12)
    return rule


def rrf(s: Scores, k: int = 60, depth: int = 100) -> np.ndarray:
    out = np.zeros_like(s.bm25)
    dense = cosine(s, 0.5)
    for i in range(len(s.ids)):
        for scores in (dense[i], s.bm25[i]):
            order = np.argsort(-scores, kind="stable")[:depth]
            order = order[scores[order] > 0] if scores is s.bm25[i] else order
            out[i, order] += 1 / (k + np.arange(1, len(order) + 1))
    return out + 1e-9 * dense


def ranks(s: Scores, scores: np.ndarray) -> dict[str, int | None]:
    order = np.argsort(-scores, axis=1, kind="stable")[:, :DEPTH]
    out: dict[str, int | None] = {}
    for i, qid in enumerate(s.ids):
        hit = np.flatnonzero(s.correct[i, order[i]])
        out[qid] = int(hit[0]) + 1 if len(hit) else None
    return out


def figures(r: dict[str, int | None], base: dict[str, int | None]) -> dict[str, Any]:
    values = list(r.values())
    return {"mrr": round(mrr(values).value, 4), "recall@4": round(recall_at(values, 4).value, 4),
            "versus_dense": paired_rr(r, base)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=ROOT / ".bench-quality" / "loso")
    args = parser.parse_args()
    opened: dict[str, Any] = {}
    with Citerag() as app:
        data = {name: collect(app, name, args.cache.resolve(), opened) for name in SETS}
    base = {n: ranks(s, cosine(s, 0.5)) for n, s in data.items()}
    grid = {(w, f): {n: ranks(s, adaptive(w, f)(s)) for n, s in data.items()}
            for w, f in itertools.product(WEIGHTS, SHARES)}
    score = {key: {n: mrr(list(r[n].values())).value for n in SETS} for key, r in grid.items()}
    held_out = {}
    print("| held-out set | fitted on | weight, share chosen | MRR (dense) | R@4 (dense) | RR vs dense, p |")
    print("|---|---|---|---|---|---|")
    for name in SETS:
        relatives = next(f for f in FAMILIES if name in f)
        seen = [n for n in SETS if n not in relatives]
        chosen = max(grid, key=lambda key: (np.mean([score[key][n] for n in seen]), -key[0]))
        f = figures(grid[chosen][name], base[name])
        d = figures(base[name], base[name])
        held_out[name] = {"fitted_on": seen, "weight": chosen[0], "share": chosen[1], **f, "dense": d}
        t = f["versus_dense"]
        print(f"| {name} | {len(seen)} sets | {chosen[0]}, {chosen[1]} | {f['mrr']:.3f} ({d['mrr']:.3f}) | "
              f"{f['recall@4']:.3f} ({d['recall@4']:.3f}) | {t['wins']}:{t['losses']}, {t['p']:.3g} |")
    shipped = max(grid, key=lambda key: (np.mean([score[key][n] for n in SETS]), -key[0]))
    rivals = {"adaptive (all sets' fit)": adaptive(*shipped), "dense (index cosine)": cosine_rule,
              "BM25": lambda s: s.bm25 + 1e-9 * cosine(s, 0.5), "RRF (k = 60)": rrf,
              **{f"cosine + {w} x BM25 / best BM25": relative(w) for w in (0.1, 0.2, 0.3)}}
    table = {name: {n: figures(ranks(s, rule(s)), base[n]) for n, s in data.items()} for name, rule in rivals.items()}
    print(f"\nfitted on all eight sets: weight {shipped[0]}, share {shipped[1]}\n")
    print("| rule | " + " | ".join(SETS) + " |")
    print("|---|" + "---|" * len(SETS))
    for name, row in table.items():
        print(f"| {name} | " + " | ".join(f"{row[n]['mrr']:.3f} ({row[n]['versus_dense']['wins']}:"
                                          f"{row[n]['versus_dense']['losses']})" for n in SETS) + " |")
    out = ROOT / "benchmarks" / "results" / "retrieval_loso.json"
    out.write_text(json.dumps({"held_out": held_out, "fitted_on_all": {"weight": shipped[0], "share": shipped[1]},
                               "rules": table, "grid": {f"{w},{f}": score[(w, f)] for w, f in grid}}, indent=1)
                   + "\n", encoding="utf-8")
    print(f"\nwrote {out}")


def cosine_rule(s: Scores) -> np.ndarray:
    return cosine(s, 0.5)


if __name__ == "__main__":
    main()
