"""Runs an evaluation: one index per (embedder, strategy), every query through every retriever.

Indexes live under `cache/<embedder>/<strategy>` and are reused: the indexer skips documents whose
bytes and stamps are unchanged, so a second run only embeds what changed.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citerag.app.collection import Collection
from citerag.app.files import extract_file
from citerag.app.home import Citerag
from citerag.app.models import SearchOptions
from citerag.chunk import STRATEGIES
from citerag.errors import CiteragError
from citerag.eval.metrics import chars_to_needle
from citerag.eval.needle import NeedleProblem, check_needles, chunk_body, destroyed
from citerag.eval.truth import OodQuery, Question
from citerag.ingest.files import discover
from citerag.refusal.calibrate import needs_refit
from citerag.settings import MODES, Settings
from citerag.text import collapse
from citerag.types import Extracted

DEPTH = 20  # hits retrieved per query: Recall@20 and MRR@20 need no more
RERANKED = "hybrid+rerank"  # the retriever name of hybrid's shortlist reordered by the cross-encoder


@dataclass(frozen=True)
class Setup:
    embedder: str
    strategy: str
    retriever: str

    @property
    def id(self) -> str:
        return f"{self.strategy}/{self.retriever}/{self.embedder}"


@dataclass
class IndexInfo:
    embedder: str
    strategy: str
    path: str
    documents: int
    failed: list[dict[str, str]]
    reembedded: int  # documents (re)indexed by this run; the rest were reused
    seconds: float
    chunks: int
    max_tokens: int
    over_window: int
    embedded_tokens: int
    header_tokens: int
    destroyed: list[str]

    @property
    def header_share(self) -> float:
        return self.header_tokens / self.embedded_tokens if self.embedded_tokens else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "seconds": round(self.seconds, 2), "header_share": round(self.header_share, 6)}


@dataclass
class QueryResult:
    rank: int | None  # first hit holding the needle; None when none of the top DEPTH does
    correct: list[int]  # every rank holding the needle
    distances: list[float]  # cosine distance per hit, rank order
    # Characters of quoted content (chunk.content, what a citation shows) read in rank order up to and including
    # the first correct hit; None when rank is. Defaulted so results built without it (older code) still work.
    chars: int | None = None
    lexical: list[float] = field(default_factory=list)  # each hit's share of the question's lexical evidence

    def as_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "correct": self.correct, "distances": [round(d, 6) for d in self.distances],
                "chars": self.chars, "lexical": [round(x, 6) for x in self.lexical]}


@dataclass
class Run:
    setups: list[Setup]
    indexes: list[IndexInfo]
    answerable: dict[str, dict[str, QueryResult]]  # setup id -> question id -> result
    ood: dict[str, dict[str, QueryResult]]
    needle_problems: list[NeedleProblem]
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)
    latency: dict[str, list[float]] = field(default_factory=dict)  # setup id -> rerank seconds per query
    answers: dict[str, Any] | None = None  # what the `generate` hook returned (answer-level figures)
    phrases: dict[str, dict[str, QueryResult]] = field(default_factory=dict)  # exact-words queries, as answerable
    # "<embedder>/<strategy>" -> the index's calibrated refusal rule (RefusalRule as a dict; None: too small)
    refusal: dict[str, dict[str, Any] | None] = field(default_factory=dict)


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


def corpus_files(corpus: Path, exclude: Sequence[str] = ()) -> list[Path]:
    """Supported files under `corpus`, less those whose name or relative path matches an `exclude` glob."""
    if not corpus.is_dir():
        raise CiteragError(f"corpus {corpus} is not a directory")
    files = discover([corpus]).files
    root = corpus.resolve()

    def excluded(f: Path) -> bool:
        return any(fnmatch.fnmatch(f.name, p) or fnmatch.fnmatch(f.relative_to(root).as_posix(), p) for p in exclude)

    kept = [f for f in files if not excluded(f)]
    if not kept:
        raise CiteragError(f"no documents left under {corpus} after --exclude {' '.join(exclude)}")
    return kept


def extract_corpus(files: Sequence[Path]) -> dict[str, Extracted]:
    out: dict[str, Extracted] = {}
    for path in files:
        try:
            out[path.name] = extract_file(path)
        except CiteragError:
            continue  # the indexer reports the failure
    return out


def parse_list(value: str, allowed: Sequence[str] | None, what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise CiteragError(f"no {what} given")
    if allowed is not None:
        bad = [v for v in items if v not in allowed]
        if bad:
            raise CiteragError(f"unknown {what} {', '.join(bad)}: choose from {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def build_index(app: Citerag, base: Settings, files: Sequence[Path], cache: Path, embedder: str, strategy: str,
                questions: Sequence[Question], log: Callable[[str], None]) -> tuple[IndexInfo, Collection]:
    """The (embedder, strategy) index as a collection of `app`, brought up to date with `files`."""
    index_dir = (cache / safe_name(embedder) / strategy).resolve()
    # The store URL follows index_dir (base never sets one).
    settings = base.with_changes(collection=f"{safe_name(embedder)}.{strategy}", index_dir=index_dir,
                                 strategy=strategy, embedding_model=embedder)
    collection = app.open_collection(settings, create=True)
    started = time.perf_counter()
    report = collection.ingest(files)
    wanted = {str(f) for f in files}
    for doc in collection.documents():  # left from a run over other files (or an --exclude added since)
        if doc.source_path not in wanted:
            collection.delete(doc.id)
    if any(d.status != "indexed" for d in collection.documents()):  # failures are kept; try them once more
        retried = collection.retry_failed()
        report.indexed += retried.indexed
        report.unchanged -= len(retried.indexed)
        report.failed = retried.failed
    _calibrated(collection, log)
    seconds = time.perf_counter() - started
    log(f"index {embedder}/{strategy}: {len(report.indexed)} embedded, {report.unchanged} reused, "
        f"{len(report.failed)} failed ({seconds:.1f}s)")
    chunks, documents = collection.indexed_chunks()
    stats = collection.chunk_stats()
    every = collection.documents()
    docs = [d for d in every if d.status == "indexed"]
    failed = [{"source_path": d.source_path, "error": d.error or ""} for d in every if d.status != "indexed"]
    tokens = [t for d in docs if d.id in stats for t in stats[d.id].tokens]
    headers = [t for d in docs if d.id in stats for t in stats[d.id].header_tokens]
    bodies = [chunk_body(c, documents[c.document_id]) for c in chunks]
    max_tokens = app.encoder(embedder).max_tokens
    info = IndexInfo(embedder=embedder, strategy=strategy, path=str(index_dir), documents=len(docs), failed=failed,
                     reembedded=len(report.indexed), seconds=seconds, chunks=len(chunks),
                     max_tokens=max_tokens, over_window=sum(t > max_tokens for t in tokens),
                     embedded_tokens=sum(tokens), header_tokens=sum(headers),
                     destroyed=destroyed(bodies, questions))
    return info, collection


def _calibrated(collection: Collection, log: Callable[[str], None]) -> None:
    """The index calibrated as any collection is (ingest does it after a change); again when a reused index has
    no rule, one fitted on another set of documents (files left out since), or one of an older version."""
    rule = collection.refusal_rule()
    indexed = sum(d.status == "indexed" for d in collection.documents())
    if rule is not None and rule.documents == indexed and not needs_refit(rule, indexed, rule.encoder):
        return
    try:
        rule = collection.calibrate()
        log(f"refusal rule {collection.name}: {rule.describe()}")
    except CiteragError as exc:
        log(f"refusal rule {collection.name}: not calibrated: {exc}")


def query_result(hits: Sequence[Any], q: Question | OodQuery, collapsed: dict[int, str]) -> QueryResult:
    """One query's hits (rank order) scored: `collapsed` maps chunk id to its whitespace-collapsed body, which
    decides correctness; the budget counts `chunk.content` instead, since that is what a reader is shown."""
    hits = sorted(hits, key=lambda h: h.rank)  # search returns rank order already; the budget depends on it
    needle = collapse(q.needle) if isinstance(q, Question) else None
    correct = [h.rank for h in hits if needle is not None and needle in collapsed[h.chunk.id]]
    rank = correct[0] if correct else None
    lengths = [len(h.chunk.content) for h in hits]
    return QueryResult(rank, correct, [h.cosine_distance for h in hits], chars_to_needle(lengths, rank),
                       [h.lexical for h in hits])


def score_queries(collection: Collection, mode: str, queries: Sequence[Question | OodQuery],
                  collapsed: dict[int, str]) -> dict[str, QueryResult]:
    options = SearchOptions(mode=mode, k=DEPTH, rerank_model="")
    return {q.id: query_result(collection.search(q.query, options).hits, q, collapsed) for q in queries}


def score_reranked(collection: Collection, rerank_model: str, shortlist: int, queries: Sequence[Question | OodQuery],
                   collapsed: dict[int, str], seconds: list[float]) -> dict[str, QueryResult]:
    """Hybrid's first `shortlist` hits reordered by the cross-encoder (the first DEPTH kept); the rerank
    seconds of each query are appended to `seconds`."""
    options = SearchOptions(mode="hybrid", k=DEPTH, rerank_model=rerank_model, shortlist=shortlist)
    out: dict[str, QueryResult] = {}
    for q in queries:
        result = collection.search(q.query, options)
        seconds.append(result.timings["rerank"])
        out[q.id] = query_result(result.hits, q, collapsed)
    return out


# Called once, for the first embedder and `generate_strategy`, with that index's collection.
GenerateHook = Callable[[Collection], dict[str, Any]]


def run_eval(corpus: Path, questions: Sequence[Question], ood: Sequence[OodQuery], *, strategies: Sequence[str],
             retrievers: Sequence[str], embedders: Sequence[str], cache: Path, exclude: Sequence[str] = (),
             log: Callable[[str], None] = lambda s: None, rerank_model: str = "", shortlist: int = 25,
             generate: GenerateHook | None = None, generate_strategy: str | None = None,
             settings: Settings | None = None, app: Citerag | None = None, phrases: Sequence[Question] = ()) -> Run:
    """`settings` are the base every index's collection starts from (threshold, generator...); each index
    changes only its folder, strategy and embedder. Its collections are opened in `app` (a new one if None).
    `phrases` (exact-words queries: text pasted from a document) are scored apart from `questions`."""
    for s in strategies:
        if s not in STRATEGIES:
            raise CiteragError(f"unknown strategy {s!r}: choose from {', '.join(STRATEGIES)}")
    for r in retrievers:
        if r not in MODES:
            raise CiteragError(f"unknown retriever {r!r}: choose from {', '.join(MODES)}")
    started = time.perf_counter()
    files = corpus_files(corpus, exclude)
    problems = check_needles(extract_corpus(files), [*questions, *phrases])
    for p in problems:
        log(f"ground truth: {p.truth}: {p.problem}")
    run = Run([], [], {}, {}, problems, 0.0)
    owner = Citerag() if app is None else app
    try:
        _run_all(owner, settings or Settings(), run, files, questions, ood, strategies, retrievers, embedders, cache,
                 log, rerank_model, shortlist, generate, generate_strategy, phrases)
    finally:
        if app is None:
            owner.close()
    run.seconds = time.perf_counter() - started
    return run


def _run_all(app: Citerag, base: Settings, run: Run, files: list[Path], questions: Sequence[Question],
             ood: Sequence[OodQuery], strategies: Sequence[str], retrievers: Sequence[str], embedders: Sequence[str],
             cache: Path, log: Callable[[str], None], rerank_model: str, shortlist: int,
             generate: GenerateHook | None, generate_strategy: str | None, phrases: Sequence[Question]) -> None:
    for embedder in embedders:
        t0 = time.perf_counter()
        # One batch per embedder, shared by every strategy through the application's query cache.
        app.embed_queries(embedder, [*(q.query for q in questions), *(o.query for o in ood),
                                    *(p.query for p in phrases)], base.cache_url,
                          base.cache_query_ttl)
        run.timings[f"embed queries {embedder}"] = time.perf_counter() - t0
        for strategy in strategies:
            info, collection = build_index(app, base, files, cache, embedder, strategy, questions, log)
            run.indexes.append(info)
            rule = collection.refusal_rule()
            run.refusal[f"{embedder}/{strategy}"] = None if rule is None else dataclasses.asdict(rule)
            chunks, documents = collection.indexed_chunks()
            bodies = {c.id: collapse(chunk_body(c, documents[c.document_id])) for c in chunks}
            t0 = time.perf_counter()
            for mode in retrievers:
                setup = Setup(embedder, strategy, mode)
                run.setups.append(setup)
                run.answerable[setup.id] = score_queries(collection, mode, questions, bodies)
                run.ood[setup.id] = score_queries(collection, mode, ood, bodies)
                if phrases:
                    run.phrases[setup.id] = score_queries(collection, mode, phrases, bodies)
            if rerank_model:
                setup = Setup(embedder, strategy, RERANKED)
                run.setups.append(setup)
                seconds: list[float] = []
                run.answerable[setup.id] = score_reranked(collection, rerank_model, shortlist, questions, bodies,
                                                          seconds)
                run.ood[setup.id] = score_reranked(collection, rerank_model, shortlist, ood, bodies, seconds)
                run.latency[setup.id] = seconds
            run.timings[f"query {embedder}/{strategy}"] = time.perf_counter() - t0
            run.timings[f"index {embedder}/{strategy}"] = info.seconds
            if generate is not None and run.answers is None and strategy == (generate_strategy or strategies[0]):
                t0 = time.perf_counter()
                log(f"generate: answering {len(questions) + len(ood)} queries on {embedder}/{strategy}")
                run.answers = {"embedder": embedder, "strategy": strategy,
                               **generate(collection)}
                run.timings[f"generate {embedder}/{strategy}"] = time.perf_counter() - t0
