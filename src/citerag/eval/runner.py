"""Runs an evaluation: one index per (embedder, strategy), every query through every retriever.

Indexes live under `cache/<embedder>/<strategy>` and are reused: the indexer skips documents whose
bytes and stamps are unchanged, so a second run only embeds what changed.
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from citerag.chunk import STRATEGIES
from citerag.config import Config
from citerag.embed import Encoder, load_encoder
from citerag.errors import CiteragError
from citerag.eval.needle import NeedleProblem, check_needles, chunk_body, collapse, destroyed
from citerag.eval.truth import OodQuery, Question
from citerag.extract import extractor_for
from citerag.ingest import Indexer, discover
from citerag.search import MODES, Retriever
from citerag.search.rerank import DEFAULT_SHORTLIST, Reranker, rerank
from citerag.store import ChunkStats, Snapshot, open_store
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

    def as_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "correct": self.correct, "distances": [round(d, 6) for d in self.distances]}


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


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


def corpus_files(corpus: Path, exclude: Sequence[str] = ()) -> list[Path]:
    """Supported files under `corpus`, less those whose name or relative path matches an `exclude` glob."""
    if not corpus.is_dir():
        raise CiteragError(f"corpus {corpus} is not a directory")
    files, _ = discover([corpus])
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
        extractor = extractor_for(path)
        if extractor is None:
            continue
        try:
            out[path.name] = extractor.extract(path.read_bytes(), path)
        except (OSError, CiteragError):
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


def build_index(files: Sequence[Path], cache: Path, embedder: str, strategy: str, questions: Sequence[Question],
                log: Callable[[str], None], vectors: dict[str, np.ndarray] | None = None
                ) -> tuple[IndexInfo, Retriever]:
    index_dir = cache / safe_name(embedder) / strategy
    store = open_store(index_dir, create=True)
    cfg = Config(index_dir=index_dir, strategy=strategy, embedding_model=embedder)
    encoder: Encoder = load_encoder(embedder)
    started = time.perf_counter()
    indexer = Indexer(store, cfg, lambda: _EmptySafe(encoder))
    report = indexer.ingest(files)
    wanted = {str(f) for f in files}
    for doc in store.documents():  # left from a run over other files (or an --exclude added since)
        if doc.source_path not in wanted:
            store.delete(doc.id)
    if any(d.status != "indexed" for d in store.documents()):  # failures are kept; try them once more
        retried = indexer.retry_failed()
        report.indexed += retried.indexed
        report.unchanged -= len(retried.indexed)
        report.failed = retried.failed
    seconds = time.perf_counter() - started
    log(f"index {embedder}/{strategy}: {len(report.indexed)} embedded, {report.unchanged} reused, "
        f"{len(report.failed)} failed ({seconds:.1f}s)")
    snapshot = store.snapshot(embedder)
    stats = store.chunk_stats()
    docs = [d for d in store.documents() if d.status == "indexed"]
    failed = [{"source_path": d.source_path, "error": d.error or ""} for d in store.documents()
              if d.status != "indexed"]
    tokens = [t for d in docs for t in stats.get(d.id, ChunkStats()).tokens]
    headers = [t for d in docs for t in stats.get(d.id, ChunkStats()).header_tokens]
    bodies = [chunk_body(c, snapshot.documents[c.document_id]) for c in snapshot.chunks]
    store.close()
    info = IndexInfo(embedder=embedder, strategy=strategy, path=str(index_dir), documents=len(docs), failed=failed,
                     reembedded=len(report.indexed), seconds=seconds, chunks=len(snapshot.chunks),
                     max_tokens=encoder.max_tokens, over_window=sum(t > encoder.max_tokens for t in tokens),
                     embedded_tokens=sum(tokens), header_tokens=sum(headers),
                     destroyed=destroyed(bodies, questions))
    return info, _Prepared(snapshot, encoder, vectors or {})


class _Prepared(Retriever):
    """A Retriever whose query vectors were embedded beforehand in one batch (per embedder, shared by
    every strategy), which is the same vector the retriever would compute one query at a time."""

    def __init__(self, snapshot: Snapshot, encoder: Encoder, vectors: dict[str, np.ndarray]) -> None:
        super().__init__(snapshot, encoder)
        self._vectors = vectors

    def _embed_uncached(self, query: str) -> np.ndarray:
        vector = self._vectors.get(query)
        return vector if vector is not None else super()._embed_uncached(query)


def embed_queries(encoder: Encoder, queries: Sequence[str]) -> dict[str, np.ndarray]:
    texts = list(dict.fromkeys(queries))
    encode = getattr(encoder, "encode_queries", None) or encoder.encode
    return dict(zip(texts, encode(texts), strict=True))


class _EmptySafe:
    """Passes everything to the encoder, but answers count_tokens([]) itself: the sentence-transformers
    tokenizer raises IndexError on an empty batch, which the indexer sends for chunks without a header."""

    def __init__(self, inner: Encoder) -> None:
        self.inner = inner
        self.name, self.dim, self.max_tokens = inner.name, inner.dim, inner.max_tokens

    def encode(self, texts: list[str], progress: bool = False) -> Any:
        return self.inner.encode(texts, progress)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts) if texts else []


def score_queries(retriever: Retriever, mode: str, queries: Sequence[Question | OodQuery],
                  collapsed: dict[int, str]) -> dict[str, QueryResult]:
    out: dict[str, QueryResult] = {}
    for q in queries:
        hits = retriever.search(q.query, mode=mode, k=DEPTH)
        needle = collapse(q.needle) if isinstance(q, Question) else None
        correct = [h.rank for h in hits if needle is not None and needle in collapsed[h.chunk.id]]
        out[q.id] = QueryResult(correct[0] if correct else None, correct, [h.cosine_distance for h in hits])
    return out


def score_reranked(retriever: Retriever, reranker: Reranker, shortlist: int, queries: Sequence[Question | OodQuery],
                   collapsed: dict[int, str], seconds: list[float]) -> dict[str, QueryResult]:
    """Hybrid's first `shortlist` hits reordered by the cross-encoder (the first DEPTH kept); the rerank
    seconds of each query are appended to `seconds`."""
    out: dict[str, QueryResult] = {}
    for q in queries:
        hits = retriever.search(q.query, mode="hybrid", k=max(DEPTH, shortlist))
        t0 = time.perf_counter()
        hits = rerank(q.query, hits, reranker, shortlist)[:DEPTH]
        seconds.append(time.perf_counter() - t0)
        needle = collapse(q.needle) if isinstance(q, Question) else None
        correct = [h.rank for h in hits if needle is not None and needle in collapsed[h.chunk.id]]
        out[q.id] = QueryResult(correct[0] if correct else None, correct, [h.cosine_distance for h in hits])
    return out


# Called once, for the first embedder and `generate_strategy`, with that index's retriever and folder.
GenerateHook = Callable[[Retriever, Path], dict[str, Any]]


def run_eval(corpus: Path, questions: Sequence[Question], ood: Sequence[OodQuery], *, strategies: Sequence[str],
             retrievers: Sequence[str], embedders: Sequence[str], cache: Path, exclude: Sequence[str] = (),
             log: Callable[[str], None] = lambda s: None, reranker: Reranker | None = None,
             shortlist: int = DEFAULT_SHORTLIST, generate: GenerateHook | None = None,
             generate_strategy: str | None = None) -> Run:
    for s in strategies:
        if s not in STRATEGIES:
            raise CiteragError(f"unknown strategy {s!r}: choose from {', '.join(STRATEGIES)}")
    for r in retrievers:
        if r not in MODES:
            raise CiteragError(f"unknown retriever {r!r}: choose from {', '.join(MODES)}")
    started = time.perf_counter()
    files = corpus_files(corpus, exclude)
    problems = check_needles(extract_corpus(files), questions)
    for p in problems:
        log(f"ground truth: {p.truth}: {p.problem}")
    run = Run([], [], {}, {}, problems, 0.0)
    for embedder in embedders:
        t0 = time.perf_counter()
        texts = [q.query for q in questions] + [o.query for o in ood]
        vectors = embed_queries(load_encoder(embedder), texts)
        run.timings[f"embed queries {embedder}"] = time.perf_counter() - t0
        for strategy in strategies:
            info, retriever = build_index(files, cache, embedder, strategy, questions, log, vectors)
            run.indexes.append(info)
            bodies = {c.id: collapse(chunk_body(c, retriever.snapshot.documents[c.document_id]))
                      for c in retriever.snapshot.chunks}
            t0 = time.perf_counter()
            for mode in retrievers:
                setup = Setup(embedder, strategy, mode)
                run.setups.append(setup)
                run.answerable[setup.id] = score_queries(retriever, mode, questions, bodies)
                run.ood[setup.id] = score_queries(retriever, mode, ood, bodies)
            if reranker is not None:
                setup = Setup(embedder, strategy, RERANKED)
                run.setups.append(setup)
                seconds: list[float] = []
                run.answerable[setup.id] = score_reranked(retriever, reranker, shortlist, questions, bodies, seconds)
                run.ood[setup.id] = score_reranked(retriever, reranker, shortlist, ood, bodies, seconds)
                run.latency[setup.id] = seconds
            run.timings[f"query {embedder}/{strategy}"] = time.perf_counter() - t0
            run.timings[f"index {embedder}/{strategy}"] = info.seconds
            if generate is not None and run.answers is None and strategy == (generate_strategy or strategies[0]):
                t0 = time.perf_counter()
                log(f"generate: answering {len(questions) + len(ood)} queries on {embedder}/{strategy}")
                run.answers = {"embedder": embedder, "strategy": strategy,
                               **generate(retriever, Path(info.path))}
                run.timings[f"generate {embedder}/{strategy}"] = time.perf_counter() - t0
    run.seconds = time.perf_counter() - started
    return run
