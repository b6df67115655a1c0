"""Retrieval quality on every dev set, in one run: citerag's shipped default (`Settings()` as it stands, searched
with `SearchOptions(k=20)`) against what a user would otherwise build over the same canonical texts:

- citerag with all-MiniLM-L6-v2 as its encoder (English must never be significantly worse than MiniLM alone);
- LangChain's RecursiveCharacterTextSplitter 1000/200 and 512/64, all-MiniLM-L6-v2, dense cosine;
- bm25s (its default tokenizer, the corpus language's stopwords where bm25s has them) over the 1000/200 chunks.

    pip install -r benchmarks/requirements.txt
    python benchmarks/bench_quality.py [SET_FOLDER ...] [--cache DIR]

Sets: every folder under eval/ with a questions.jsonl, unless folders are given. Correct = a returned chunk holds
the whitespace-collapsed needle (the dev sets' rule); ranks over the top 20. Per row: R@1, R@4, MRR, recall at a
context budget B (characters of quoted content read in rank order up to and including the first correct chunk,
<= B; citerag counts what a hit quotes, chunk.content, not its embedded header) and destroyed answers (needles no
chunk holds whole). Each row is paired with the default: the sign test on reciprocal rank (equal k), on characters
to the needle (a miss costs infinitely many; both missed is a tie) and on recall within 2000 characters; wins are
queries the default does better. Pooled: wins and losses summed over the sets, one sign test each.
One citerag index per (corpus, excludes) and encoder, one set of peer chunks and vectors per corpus, all kept
under --cache (default .bench-quality). Writes benchmarks/results/quality.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.errors import CiteragError
from citerag.eval.devset import dev_set
from citerag.eval.metrics import estimate, summary, within
from citerag.eval.needle import chunk_body, destroyed
from citerag.eval.paired import paired_budget as paired_within
from citerag.eval.paired import paired_chars, paired_rr
from citerag.eval.runner import corpus_files, extract_corpus, safe_name
from citerag.eval.stats import sign_test
from citerag.eval.truth import OodQuery, Question, load_ood, load_questions
from citerag.lang import detect
from citerag.refusal.rule import RULE_VERSION
from citerag.settings import Settings
from citerag.text import collapse

ROOT = Path(__file__).resolve().parent.parent
DEPTH = 20
MODEL = "all-MiniLM-L6-v2"
BUDGETS = (1000, 2000, 4000)
POOLED_BUDGET = 2000
ALPHA = 0.05
DEFAULT, MINILM, BM25 = "citerag default", f"citerag, {MODEL}", "bm25s on 1000/200"
SPLITS = {"LangChain 1000/200 + MiniLM": (1000, 200), "LangChain 512/64 + MiniLM": (512, 64)}
TESTS = ("rr", "chars", f"budget@{POOLED_BUDGET}")
INDEX_CHOICES = ("embedding_model", "strategy", "target", "overlap", "semantic_percentile", "lexical")


@dataclass
class Found:
    """Per question id: rank of the first correct chunk and characters read up to it (None: not in the top 20)."""
    ranks: dict[str, int | None] = field(default_factory=dict)
    chars: dict[str, int | None] = field(default_factory=dict)
    destroyed: int = 0


@dataclass
class Corpus:
    """What every set over one (corpus, excludes) shares: citerag collections, peer chunks, vectors, BM25."""
    name: str
    files: list[Path]
    texts: list[str]
    language: str
    collections: dict[str, Collection] = field(default_factory=dict)
    chunks: dict[str, list[str]] = field(default_factory=dict)
    vectors: dict[str, np.ndarray] = field(default_factory=dict)
    bm25: Any = None
    stopwords: str | None = None
    timings: dict[str, float] = field(default_factory=dict)


@contextmanager
def timed(timings: dict[str, float], step: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    timings[step] = round(timings.get(step, 0.0) + time.perf_counter() - started, 3)


def digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:10]


def default_sets() -> list[Path]:
    return sorted(p.parent for p in (ROOT / "eval").glob("*/questions.jsonl"))


def found_in(texts: Sequence[str], lengths: Sequence[int], needle: str) -> tuple[int | None, int | None]:
    """First correct rank among the first DEPTH `texts` (collapsed) and the characters read up to it."""
    want = collapse(needle)
    rank = next((i + 1 for i, text in enumerate(texts[:DEPTH]) if want in text), None)
    return rank, None if rank is None else sum(lengths[:rank])


def destroyed_count(bodies: Sequence[str], questions: Sequence[Question]) -> int:
    return len(destroyed(bodies, questions))


def bm25_stopwords(language: str) -> str | None:
    """The language code if bm25s has a stopword list for it, else None."""
    import bm25s

    try:
        bm25s.tokenize(["probe"], stopwords=language, show_progress=False)
    except (ValueError, KeyError, TypeError):
        return None
    return language


def open_corpus(app: Citerag, corpus: Path, exclude: tuple[str, ...], cache: Path,
                settings: dict[str, Settings]) -> Corpus:
    """Index the corpus under each citerag setting (reused from `cache` when nothing changed), split it for the
    peers and embed their chunks (cached by content), and build bm25s over the 1000/200 chunks."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    files = corpus_files(corpus, exclude)
    key = f"{safe_name(corpus.resolve().parent.name)}-{digest(str(corpus.resolve()), sorted(exclude))}"
    timings: dict[str, float] = {}
    with timed(timings, "extract"):
        texts = [e.text for e in extract_corpus(files).values()]
    language = Counter(detect(t) for t in texts).most_common(1)[0][0]
    c = Corpus(key, files, texts, language, timings=timings)
    for row, s in settings.items():
        choice = digest(*(getattr(s, name) for name in INDEX_CHOICES))
        # Every index choice set explicitly, so an index stamped under older defaults is never taken as the default.
        s = s.with_changes(index_dir=(cache / key / f"{safe_name(s.embedding_model)}-{choice}").resolve(),
                           collection=f"bq-{digest(key, choice)}", **{n: getattr(s, n) for n in INDEX_CHOICES})
        with timed(timings, f"citerag index {s.embedding_model}"):
            collection = app.open_collection(s, create=True)
            collection.ingest(files)
            wanted = {str(f) for f in files}
            for doc in collection.documents():
                if doc.source_path not in wanted:
                    collection.delete(doc.id)
        c.collections[row] = collection
    encoder = app.encoder(MODEL)
    for row, (size, overlap) in SPLITS.items():
        with timed(timings, f"split {size}/{overlap}"):
            splitter = RecursiveCharacterTextSplitter(chunk_size=size, chunk_overlap=overlap)
            c.chunks[row] = [chunk for t in texts for chunk in splitter.split_text(t)]
        stored = cache / "peers" / f"{digest(MODEL, c.chunks[row])}.npy"
        with timed(timings, f"embed {size}/{overlap} {MODEL}"):
            if stored.is_file():
                c.vectors[row] = np.load(stored)
            else:
                c.vectors[row] = np.asarray(encoder.encode(c.chunks[row]), dtype=np.float32)
                stored.parent.mkdir(parents=True, exist_ok=True)
                np.save(stored, c.vectors[row])
    import bm25s

    c.stopwords = bm25_stopwords(language)
    with timed(timings, "bm25s index 1000/200"):
        c.bm25 = bm25s.BM25()
        c.bm25.index(bm25s.tokenize(c.chunks[next(iter(SPLITS))], stopwords=c.stopwords or [], show_progress=False),
                     show_progress=False)
    return c


def citerag_found(app: Citerag, collection: Collection, questions: Sequence[Question]) -> Found:
    s = collection.settings
    app.embed_queries(s.embedding_model, [q.query for q in questions], s.cache_url, s.cache_query_ttl)  # one batch
    chunks, documents = collection.indexed_chunks()
    bodies = {c.id: chunk_body(c, documents[c.document_id]) for c in chunks}
    collapsed = {i: collapse(b) for i, b in bodies.items()}
    out = Found(destroyed=destroyed_count(list(bodies.values()), questions))
    for q in questions:
        hits = collection.search(q.query, SearchOptions(k=DEPTH)).hits
        out.ranks[q.id], out.chars[q.id] = found_in([collapsed[h.chunk.id] for h in hits],
                                                    [len(h.chunk.content) for h in hits], q.needle)
    return out


def refusals(collection: Collection, questions: Sequence[Question], ood: Sequence[OodQuery]) -> dict[str, Any]:
    """The collection's calibrated rule as an ask applies it (both cuts, at most max_sources hits): answerable
    questions refused, out-of-domain ones answered (traps apart)."""
    rule = collection.refusal_rule()
    if rule is None or rule.version < RULE_VERSION:  # a cache left by an older citerag: fit it as ingest would
        rule = collection.calibrate()
    k = collection.settings.max_sources

    def answered(text: str) -> bool:
        return bool(rule.gate(collection.search(text, SearchOptions(k=DEPTH)).hits, k))

    refused = sum(not answered(q.query) for q in questions)
    bluffs = [o for o in ood if answered(o.query)]
    return {"threshold": rule.threshold, "lexical_threshold": rule.lexical_threshold,
            "refused": estimate(refused, len(questions)).as_json(), "ood": len(ood),
            "ood_answered": len(bluffs), "traps_answered": sum(o.trap for o in bluffs),
            "traps": sum(o.trap for o in ood)}


def ordered_found(chunks: Sequence[str], orders: Sequence[Sequence[int]], questions: Sequence[Question]) -> Found:
    collapsed = [collapse(c) for c in chunks]
    out = Found(destroyed=destroyed_count(chunks, questions))
    for q, order in zip(questions, orders, strict=True):
        out.ranks[q.id], out.chars[q.id] = found_in([collapsed[i] for i in order], [len(chunks[i]) for i in order],
                                                    q.needle)
    return out


def peer_found(app: Citerag, c: Corpus, questions: Sequence[Question], timings: dict[str, float]) -> dict[str, Found]:
    import bm25s

    out: dict[str, Found] = {}
    with timed(timings, f"embed queries {MODEL}"):
        queries = app.embed_queries(MODEL, [q.query for q in questions])
    for row in SPLITS:
        with timed(timings, row):
            scores = queries @ c.vectors[row].T
            dense = [[int(i) for i in np.argsort(-s, kind="stable")[:DEPTH]] for s in scores]
            out[row] = ordered_found(c.chunks[row], dense, questions)
    with timed(timings, BM25):
        chunks = c.chunks[next(iter(SPLITS))]
        tokens = bm25s.tokenize([q.query for q in questions], stopwords=c.stopwords or [], show_progress=False)
        ids, scores = c.bm25.retrieve(tokens, k=min(DEPTH, len(chunks)), show_progress=False)
        # A chunk with no query word scores 0: bm25s still fills k places with them, a search would not return them.
        orders = [[int(i) for i, s in zip(row_ids, row_scores, strict=True) if s > 0]
                  for row_ids, row_scores in zip(ids, scores, strict=True)]
        out[BM25] = ordered_found(chunks, orders, questions)
    return out


def paired_budget(a: Mapping[str, int | None], b: Mapping[str, int | None], budget: int) -> dict[str, float]:
    t = paired_within(a, b, budget)
    return {"wins": t.wins, "losses": t.losses, "p": round(t.p, 6)}


def verdict(test: Mapping[str, float]) -> str:
    if test["p"] >= ALPHA or test["wins"] == test["losses"]:
        return ""
    return "citerag ahead" if test["wins"] > test["losses"] else "citerag behind"


def row_json(found: Found, default: Found | None, chunks: int) -> dict[str, Any]:
    m = summary(list(found.ranks.values()))
    chars = list(found.chars.values())
    row: dict[str, Any] = {**{k: m[k].as_json() for k in ("recall@1", "recall@4", "mrr")},
                           **{f"budget@{b}": estimate(sum(within(c, b) for c in chars), len(chars)).as_json()
                              for b in BUDGETS},
                           "destroyed": found.destroyed, "chunks": chunks}
    if default is not None:
        row["paired"] = {"rr": paired_rr(default.ranks, found.ranks), "chars": paired_chars(default.chars, found.chars),
                         TESTS[2]: paired_budget(default.chars, found.chars, POOLED_BUDGET)}
        marks = {verdict(t) for t in row["paired"].values()} - {""}
        row["verdict"] = " / ".join(sorted(marks))
    return row


def measure(app: Citerag, folder: Path, corpora: dict[tuple[str, tuple[str, ...]], Corpus], cache: Path,
            settings: dict[str, Settings]) -> dict[str, Any]:
    found = dev_set(folder)
    questions = load_questions(found.questions)
    key = (str(found.corpus.resolve()), tuple(sorted(found.exclude)))
    if key not in corpora:
        corpora[key] = open_corpus(app, found.corpus, tuple(found.exclude), cache, settings)
    c = corpora[key]
    timings: dict[str, float] = {}
    runs: dict[str, Found] = {}
    for row, collection in c.collections.items():
        with timed(timings, f"search {row}"):
            runs[row] = citerag_found(app, collection, questions)
    runs.update(peer_found(app, c, questions, timings))
    sizes = {row: len(col.indexed_chunks()[0]) for row, col in c.collections.items()}
    sizes.update({row: len(chunks) for row, chunks in c.chunks.items()})
    sizes[BM25] = sizes[next(iter(SPLITS))]
    rows = {row: row_json(f, None if row == DEFAULT else runs[DEFAULT], sizes[row]) for row, f in runs.items()}
    with timed(timings, "refusal"):
        refusal = refusals(c.collections[DEFAULT], questions, load_ood(found.ood) if found.ood else [])
    return {"dev_set": folder.name, "path": str(folder), "corpus": key[0], "exclude": list(key[1]),
            "questions": len(questions), "corpus_language": c.language, "bm25s_stopwords": c.stopwords,
            "rows": rows, "refusal": refusal, "timings": timings}


def pooled(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for row in [r for r in results[0]["rows"] if r != DEFAULT]:
        out[row] = {"sets": len(results), "questions": sum(r["questions"] for r in results)}
        for test in TESTS:
            wins = sum(r["rows"][row]["paired"][test]["wins"] for r in results)
            losses = sum(r["rows"][row]["paired"][test]["losses"] for r in results)
            out[row][test] = {"wins": wins, "losses": losses, "p": round(sign_test(wins, losses), 6)}
        out[row]["verdict"] = " / ".join(sorted({verdict(out[row][t]) for t in TESTS} - {""}))
    return out


def cell(test: Mapping[str, float]) -> str:
    mark = verdict(test)
    p = f"p={test['p']:.2g}" if test["p"] >= 1e-6 else "p<1e-6"
    return f"{test['wins']}:{test['losses']}, {p}" + (f" **{mark}**" if mark else "")


def print_set(r: dict[str, Any]) -> None:
    stop = r["bm25s_stopwords"] or "none (bm25s has no list)"
    print(f"\n### {r['dev_set']} ({r['questions']} questions; corpus language {r['corpus_language']}, "
          f"bm25s stopwords {stop})\n")
    budgets = " | ".join(f"B={b}" for b in BUDGETS)
    print(f"| retrieval | chunks | R@1 | R@4 | MRR | {budgets} | destroyed | default vs row: RR | chars | "
          f"within {POOLED_BUDGET} |")
    print("|---" * (9 + len(BUDGETS)) + "|")
    for name, row in r["rows"].items():
        figures = " | ".join(f"{row[k]['value']:.3f}" for k in ("recall@1", "recall@4", "mrr",
                                                                 *(f"budget@{b}" for b in BUDGETS)))
        tests = " | ".join(cell(row["paired"][t]) for t in TESTS) if "paired" in row else "- | - | -"
        print(f"| {name} | {row['chunks']} | {figures} | {row['destroyed']} | {tests} |")
    f = r["refusal"]
    if f:
        lexical = "none" if f["lexical_threshold"] is None else f"{f['lexical_threshold']:.3f}"
        print(f"\nciterag default's calibrated rule (cut {f['threshold']:.3f}, lexical cut {lexical}): answerable "
              f"refused {f['refused']['k']:.0f}/{f['refused']['n']} ({f['refused']['value']:.3f}); out-of-domain "
              f"answered {f['ood_answered']}/{f['ood']} (traps {f['traps_answered']}/{f['traps']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="*", type=Path, help="dev-set folders (default: every eval/*/questions.jsonl)")
    parser.add_argument("--cache", type=Path, default=ROOT / ".bench-quality")
    args = parser.parse_args()
    sets = args.sets or default_sets()
    default = Settings()
    shown = {n: getattr(default, n) for n in (*INDEX_CHOICES, "mode", "k", "rerank_model", "vector_index")}
    print("citerag default = Settings(): " + ", ".join(f"{n}={v!r}" for n, v in shown.items()))
    print(f"searched with SearchOptions(k={DEPTH}); sets: {', '.join(s.name for s in sets)}")
    started = time.perf_counter()
    corpora: dict[tuple[str, tuple[str, ...]], Corpus] = {}
    results = []
    with Citerag() as app:
        for folder in sets:
            try:
                results.append(measure(app, folder, corpora, args.cache,
                                       {DEFAULT: default, MINILM: default.with_changes(embedding_model=MODEL)}))
            except CiteragError as exc:
                raise SystemExit(f"{folder}: {exc}") from exc
            print_set(results[-1])
    pool = pooled(results)
    print(f"\n### pooled over {len(results)} sets: wins = citerag default better\n")
    print(f"| against | questions | RR | chars | within {POOLED_BUDGET} |\n|---|---|---|---|---|")
    for name, row in pool.items():
        print(f"| {name} | {row['questions']} | {' | '.join(cell(row[t]) for t in TESTS)} |")
    total = round(time.perf_counter() - started, 1)
    report = {"default_settings": {n: str(v) for n, v in shown.items()}, "depth": DEPTH, "budgets": list(BUDGETS),
              "alpha": ALPHA, "sets": results, "pooled": pool, "seconds": total,
              "corpora": [{"corpus": k[0], "exclude": list(k[1]), "files": len(c.files), "language": c.language,
                           "timings": c.timings} for k, c in corpora.items()]}
    out = ROOT / "benchmarks" / "results" / "quality.json"
    out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\n{total:.0f}s; wrote {out}")


if __name__ == "__main__":
    main()
