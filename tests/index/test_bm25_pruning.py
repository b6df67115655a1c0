"""Bm25Index.search prunes (citerag.index.bm25_prune) yet answers exactly what full scoring answers.

On real text (the dev set's chapters, XQuAD's articles in English and German), after sequences of adds, removals,
saves, loads, merges and compactions: the pruned top k equals `Rows.best` over `scores` (the same chunk ids in the
same order, the same scores to the last bit) and the reference formula over the live texts (to 1e-9), for many
queries (questions, single words, repeated words, stop words only, unknown words) and k from 1 to more than match.
Pruning is forced on these small collections (FULL_BELOW = 0), and the candidate set is run as a row mask, as
sorted rows, and as each in turn (SPARSE).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from citerag.app.files import extract_file
from citerag.chunk import chunk_extracted
from citerag.index import bm25, bm25_prune
from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.bm25 import Bm25Index
from citerag.search.bm25 import BM25
from citerag.store.base import ChunkBatch
from corpus_paths import DEV_CORPUS, ROOT

STEMMED = Analyzer("stemmed")
KS = (1, 3, 10, 100, 100_000)
ALWAYS_MASK, ALWAYS_SORTED = 10**12, 0


def chunks(paths: list[Path]) -> list[str]:
    return [c.text for p in paths for c in chunk_extracted(extract_file(p), "E")]


@pytest.fixture(scope="module")
def debian() -> list[str]:
    return chunks(sorted(DEV_CORPUS.glob("*.html")))


@pytest.fixture(scope="module")
def xquad() -> dict[str, list[str]]:
    return {lang: chunks(sorted((ROOT / "eval" / f"xquad-{lang}" / "corpus").glob("*.txt"))) for lang in ("en", "de")}


def queries(set_name: str, n: int = 25) -> list[str]:
    lines = (ROOT / "eval" / set_name / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    asked = [json.loads(line)["query"] for line in lines]
    return asked[::max(1, len(asked) // n)][:n] + [
        "debian", "the", "package", "kernel", "popcon", "Größe", "die", "Warschau",  # one word, common or rare
        "the the the", "kernel kernel package", "apt apt-get apt", "der der Stadt",  # repeated words
        "the of and to a in is it that for", "wie der die das und ist",  # stop words only
        "zqxjv", "zqxjv wqpzk", "zqxjv the kernel", "",  # unknown words, nothing at all
        "How do I configure the network interface eth0 with a static IP address on Debian?",
    ]


class Mirror:
    """An index and the live texts by chunk id it should hold, checked against full scoring and the reference."""

    def __init__(self, analyzer: Analyzer = REFERENCE) -> None:
        self.analyzer = analyzer
        self.index = Bm25Index(analyzer=analyzer)
        self.docs: dict[int, list[int]] = {}
        self.texts: dict[int, str] = {}

    def add(self, doc: int, ids: list[int], texts: list[str]) -> None:
        self.docs[doc] = ids
        self.texts.update(zip(ids, texts, strict=True))
        n = len(ids)
        self.index.add(ChunkBatch(np.array(ids, dtype=np.int64), np.full(n, doc, dtype=np.int64), texts,
                                  np.zeros((n, 0), dtype=np.float32)))

    def remove(self, doc: int) -> None:
        for cid in self.docs.pop(doc):
            del self.texts[cid]
        self.index.remove_documents([doc])

    def reopen(self, directory: Path) -> None:
        self.index = Bm25Index.load(directory, self.index.save(directory), self.analyzer)

    def check(self, questions: list[str], ks: tuple[int, ...] = KS) -> int:
        """Every query and k: pruned == full, and the reference's scores (the stemmed analyzer: where the query's
        language is the one the reference assumes; the index takes its chunks' for a short query). The number of
        searches that pruned."""
        ids = sorted(self.texts)
        reference = BM25([self.texts[i] for i in ids], analyzer=self.analyzer)
        at = {cid: i for i, cid in enumerate(ids)}
        pruned = 0
        for query in questions:
            same = self.analyzer.terms(query) == self.analyzer.terms(query, fallback=self.index.language)
            expected = reference.scores(query)
            full = self.index.scores(query)
            for k in ks:
                got_ids, got = self.index.search(query, k)
                want_ids, want = self.index.rows.best(full, k, positive=True)
                assert got_ids.tolist() == want_ids.tolist(), (query, k)
                assert np.array_equal(got, want), (query, k)  # bit for bit
                if same:
                    np.testing.assert_allclose(got, expected[[at[i] for i in got_ids.tolist()]], rtol=0, atol=1e-9)
                    assert len(got_ids) == min(k, int(np.count_nonzero(expected > 0)))
                stats = self.index._live_stats()
                tokens = self.index.analyzer.terms(query, fallback=self.index.language)
                if stats is not None and bm25_prune.top_k(tokens, self.index._terms(tokens, stats), k,
                                                          len(self.index.rows)) is not None:
                    pruned += 1
            if same:
                assert abs(self.index.query_mass(query) - reference.query_mass(query)) <= 1e-9
        return pruned


def documents(texts: list[str], size: int, first_id: int = 1) -> Iterator[tuple[int, list[int], list[str]]]:
    """Consecutive chunks as documents of `size`, with chunk ids that fall as rows rise (ties break by id, not row)."""
    parts = [texts[i:i + size] for i in range(0, len(texts), size)]
    next_id = first_id + len(texts)
    for doc, part in enumerate(parts):
        next_id -= len(part)
        yield doc, list(range(next_id, next_id + len(part))), part


@pytest.fixture(autouse=True)
def prune_always(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bm25_prune, "FULL_BELOW", 0)


@pytest.mark.parametrize("sparse", [ALWAYS_MASK, bm25_prune.SPARSE, ALWAYS_SORTED])
def test_pruned_search_equals_full_scoring_through_updates(debian: list[str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, sparse: int) -> None:
    monkeypatch.setattr(bm25_prune, "SPARSE", sparse)
    monkeypatch.setattr(bm25, "FREEZE_ROWS", 300)  # several segments, and rows still pending beside them
    questions = queries("debian-reference")
    mirror = Mirror()
    docs = list(documents(debian, 40))
    for doc, ids, texts in docs[:20]:
        mirror.add(doc, ids, texts)
    pruned = mirror.check(questions)  # in memory: frozen segments and pending rows
    mirror.reopen(tmp_path)  # saved: merged, memory-mapped, with bounds
    for doc in (3, 4, 11):
        mirror.remove(doc)  # tombstones inside a saved segment
    pruned += mirror.check(questions, (1, 10, 100))
    for doc, ids, texts in docs[20:]:
        mirror.add(doc, ids, texts)  # a new segment and pending rows; the mean length moves
    mirror.remove(25)
    pruned += mirror.check(questions, (1, 10))
    mirror.reopen(tmp_path)
    pruned += mirror.check(questions, (1, 10))
    for doc in range(0, 30, 2):
        if doc in mirror.docs:
            mirror.remove(doc)  # past a quarter dead: the next save compacts
    pruned += mirror.check(questions, (3, 10))
    mirror.reopen(tmp_path)
    assert len(mirror.index.rows) == len(mirror.texts)  # compacted
    pruned += mirror.check(questions, (1, 10, 100))
    assert pruned > 100  # the searches above did prune, not fall back to full scoring


def test_ties_break_by_chunk_id_as_full_scoring_does(debian: list[str], tmp_path: Path) -> None:
    """The same chunks under several documents: equal scores, and the k-th best tied with many others."""
    mirror = Mirror()
    copies = debian[100:160]
    for doc, first in enumerate((5000, 100, 9000, 2000)):
        mirror.add(doc, list(range(first, first + len(copies))), copies)
    mirror.add(9, list(range(20000, 20000 + 300)), debian[400:700])
    mirror.check(queries("debian-reference", 10), (1, 2, 4, 5, 7, 10))
    mirror.reopen(tmp_path)
    mirror.remove(1)
    mirror.check(queries("debian-reference", 10), (1, 3, 5))


@pytest.mark.parametrize("lang", ["en", "de"])
def test_pruned_search_on_xquad_with_both_analyzers(xquad: dict[str, list[str]], tmp_path: Path, lang: str) -> None:
    questions = queries(f"xquad-{lang}")
    for analyzer in (REFERENCE, STEMMED):
        mirror = Mirror(analyzer)
        docs = list(documents(xquad[lang], 12))
        random.Random(7).shuffle(docs)
        for doc, ids, texts in docs:
            mirror.add(doc, ids, texts)
        mirror.check(questions, (1, 5, 10))
        directory = tmp_path / analyzer.name
        directory.mkdir()
        mirror.reopen(directory)
        for doc, _, _ in docs[::3]:
            mirror.remove(doc)
        mirror.check(questions, (1, 10, 50))


def test_segments_saved_without_bounds_are_searched_exactly(debian: list[str], tmp_path: Path) -> None:
    """A segment written before bounds were kept (no bounds.npz) gets them per term, on first use."""
    mirror = Mirror()
    for doc, ids, texts in list(documents(debian, 50))[:12]:
        mirror.add(doc, ids, texts)
    state = mirror.index.save(tmp_path)
    for name in state["segments"]:
        (tmp_path / name / "bounds.npz").unlink()
    mirror.index = Bm25Index.load(tmp_path, state)
    assert all(s.bounds is None for s in mirror.index.segments)
    mirror.remove(2)
    mirror.check(queries("debian-reference", 15), (1, 10))


def test_bounds_bound_every_posting_whatever_the_mean_length(debian: list[str]) -> None:
    """A term's bound is at least each of its weights, at the mean length of the build (where it is the largest
    weight) and far from it."""
    index = Bm25Index()
    index.add(ChunkBatch(np.arange(len(debian[:600])), np.zeros(600, dtype=np.int64), debian[:600],
                         np.zeros((600, 0), dtype=np.float32)))
    index._freeze()
    (segment,) = index.segments
    assert segment.bounds is not None
    for avg in (index._avg(), 3.0, 40.0, 1e4):
        stats = bm25_prune.Stats((0, 0), 600, avg, 1.2 * (1 - 0.75 + (0.75 * index.lengths) / avg), index.rows.live,
                                 index.lengths, np.zeros(0, dtype=np.int64), 1.2, 0.75)
        for word in ("the", "debian", "package", "popcon", "a", "kernel"):
            term = bm25_prune.Term([segment.part(word, stats, index.lengths)], 1, stats)  # type: ignore[list-item]
            (rows, weights), = term.live()
            assert weights.max() <= term.bound * (1 + 1e-12)
            if avg == index._avg():  # at the build's mean length, the bound is the largest weight itself
                assert term.bound <= weights.max() * (1 + 1e-12)


def test_a_few_dead_rows_among_long_posting_lists(debian: list[str], tmp_path: Path) -> None:
    """Document frequencies over the live rows, by binary search of the few dead rows in long lists."""
    mirror = Mirror()
    for doc, ids, texts in documents(debian, 100):
        mirror.add(doc, ids, texts)
    mirror.add(500, [90_000, 90_001], debian[5:7])
    mirror.reopen(tmp_path)
    mirror.remove(500)
    mirror.check(queries("debian-reference", 15), (1, 10))
