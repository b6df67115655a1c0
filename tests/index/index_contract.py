"""What every search index must do, as test classes each implementation's module subclasses.

    class TestExactIndex(VectorIndexContract):
        index_type = ExactIndex

Indexes are keyed by stored chunk id, updated per document (remove, then add the new version), saved into a
directory and loaded back; a state once loaded keeps answering the same after later saves to the same
directory (another process may still be reading it); a database-resident index gives saving and loading their
database meaning by overriding `Durable`'s hooks (commit; a new connection's snapshot). Vectors are random unit
vectors; texts are the real chunks of the BM25 reference fixture, whose scores the lexical index must reproduce.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from citerag.index.base import Allowed
from citerag.search.bm25 import BM25
from citerag.store.base import ChunkBatch
from corpus_paths import FIXTURES

DIM = 32
BM25_FIXTURE = json.loads((FIXTURES / "bm25.json").read_text(encoding="utf-8"))


def unit(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def batch(document_id: int, first_id: int, vectors: np.ndarray, texts: list[str] | None = None) -> ChunkBatch:
    n = len(vectors)
    return ChunkBatch(ids=np.arange(first_id, first_id + n, dtype=np.int64),
                      document_ids=np.full(n, document_id, dtype=np.int64),
                      texts=texts if texts is not None else [f"chunk {first_id + i}" for i in range(n)],
                      vectors=vectors)


class Corpus:
    """What an index should hold: the live chunks, as plain arrays to compute the truth by brute force."""

    def __init__(self) -> None:
        self.ids: dict[int, list[int]] = {}  # document -> chunk ids
        self.vectors: dict[int, np.ndarray] = {}
        self.texts: dict[int, str] = {}
        self.next_id = 1

    def document(self, doc: int, vectors: np.ndarray, texts: list[str] | None = None) -> ChunkBatch:
        """A (new version of a) document: fresh chunk ids, as the store gives them."""
        b = batch(doc, self.next_id, vectors, texts)
        self.next_id += len(vectors)
        self.remove(doc)
        self.ids[doc] = b.ids.tolist()
        for i, cid in enumerate(b.ids.tolist()):
            self.vectors[cid] = vectors[i]
            self.texts[cid] = b.texts[i]
        return b

    def remove(self, doc: int) -> None:
        for cid in self.ids.pop(doc, []):
            del self.vectors[cid]
            del self.texts[cid]

    def exact(self, q: np.ndarray, k: int, documents: set[int] | None = None) -> tuple[list[int], np.ndarray]:
        """The true top k (of these documents' chunks only, when given)."""
        ids = np.array(sorted(i for d, chunks in self.ids.items() if documents is None or d in documents
                              for i in chunks), dtype=np.int64)
        if not len(ids):
            return [], np.zeros(0)
        sims = np.stack([self.vectors[i] for i in ids]) @ q
        order = np.lexsort((ids, -sims))[:k]
        return ids[order].tolist(), sims[order]


class Durable:
    """How a contract makes an index's state durable and opens a new reader of it. File-based indexes save into a
    directory and load from it; a database-resident index overrides both (commit; a new connection's snapshot)."""

    index_type: Any = None

    def persist(self, index: Any, directory: Path) -> Any:
        """Make everything the index holds durable; the state `reopen` opens."""
        return index.save(directory)

    def reopen(self, directory: Path, state: Any) -> Any:
        """A new reader of that state, as another process would open it."""
        return self.index_type.load(directory, state)


def allowed(corpus: Corpus, documents: set[int]) -> Allowed:
    """A filter's resolution, as citerag.search.filters makes it: the documents and the chunks they hold."""
    return Allowed.of(documents, sum(len(corpus.ids.get(d, [])) for d in documents))


class VectorIndexContract(Durable):
    index_type: Any = None  # the class: index_type(dim) is empty, index_type.load(directory, state) reopens

    def make(self) -> Any:
        return self.index_type(DIM)

    def test_a_filtered_search_is_the_exact_top_k_of_the_allowed_documents(self, tmp_path: Path) -> None:
        """Filters apply inside the search: the k best allowed chunks, never fewer because the unfiltered
        neighbours were of other documents; before and after the state is made durable (a graph built)."""
        corpus, index = Corpus(), self.make()
        for doc in range(1, 9):
            index.add(corpus.document(doc, unit(60, doc)))
        index.remove_documents([8])
        corpus.remove(8)
        queries = unit(12, 77)
        cases = [{3}, {2, 5}, {1, 2, 3, 4, 6}, {8}, {5, 404}, set()]
        for _ in range(2):
            for documents in cases:
                for q in queries:
                    ids, sims = index.search(q, 10, allowed(corpus, documents))
                    truth, truth_sims = corpus.exact(q, 10, documents)
                    assert ids.tolist() == truth, documents
                    np.testing.assert_allclose(sims, truth_sims, atol=1e-6)
            # Fewer allowed chunks than asked: every one of them, best first.
            ids, _ = index.search(queries[0], 100, allowed(corpus, {3}))
            assert ids.tolist() == corpus.exact(queries[0], 100, {3})[0] and len(ids) == 60
            index = self.reopen(tmp_path, self.persist(index, tmp_path))

    def test_search_is_by_chunk_id_with_exact_cosine(self) -> None:
        corpus, index = Corpus(), self.make()
        for doc in range(1, 6):
            index.add(corpus.document(doc, unit(80, doc)))
        assert len(index) == 400
        q = unit(1, 99)[0]
        ids, sims = index.search(q, 10)
        truth, truth_sims = corpus.exact(q, 10)
        assert ids.tolist() == truth
        np.testing.assert_allclose(sims, truth_sims, atol=1e-6)
        chosen = np.array([7, 3, 399], dtype=np.int64)
        np.testing.assert_allclose(index.similarity(q, chosen), [corpus.vectors[i] @ q for i in chosen.tolist()],
                                   atol=1e-6)

    def test_a_replaced_document_is_found_only_in_its_new_version(self) -> None:
        corpus, index = Corpus(), self.make()
        index.add(corpus.document(1, unit(50, 1)))
        index.add(corpus.document(2, unit(50, 2)))
        old = corpus.ids[1]
        q = unit(1, 1)[0]
        index.remove_documents([1])
        index.add(corpus.document(1, unit(30, 3)))
        ids, _ = index.search(q, 200)
        assert not set(ids.tolist()) & set(old)
        assert sorted(ids.tolist()) == sorted(corpus.vectors)
        with pytest.raises(KeyError):
            index.similarity(q, np.array(old[:1]))

    def test_a_chunk_id_that_comes_back_has_its_new_vector(self, tmp_path: Path) -> None:
        """Ids are the store's: if one is removed and later given to another chunk, the new vector counts."""
        index = self.make()
        index.add(batch(1, 1, unit(300, 1)))
        index.add(batch(2, 301, unit(300, 2)))
        index = self.reopen(tmp_path, self.persist(index, tmp_path))
        index.remove_documents([2])
        fresh = unit(300, 3)
        index.add(batch(3, 301, fresh))  # the same ids, other vectors
        for reopen in (False, True):
            if reopen:
                index = self.reopen(tmp_path, self.persist(index, tmp_path))
            for i in range(0, 300, 7):
                ids, sims = index.search(fresh[i], 1)
                assert ids.tolist() == [301 + i] and abs(sims[0] - 1.0) < 1e-5

    def test_ties_break_by_chunk_id(self) -> None:
        index = self.make()
        same = np.repeat(unit(1, 5), 6, axis=0)
        index.add(batch(1, 100, same[:3]))
        index.add(batch(2, 10, same[3:]))
        ids, _ = index.search(unit(1, 5)[0], 4)
        assert ids.tolist() == [10, 11, 12, 100]

    def test_saved_state_reopens_and_updates_incrementally(self, tmp_path: Path) -> None:
        corpus, index = Corpus(), self.make()
        for doc in range(1, 5):
            index.add(corpus.document(doc, unit(300, doc)))
        first = self.persist(index, tmp_path)
        reader = self.reopen(tmp_path, first)
        q = unit(1, 42)[0]
        before = reader.search(q, 10)[0].tolist()
        assert before == corpus.exact(q, 10)[0]
        # The writer replaces one document, removes another, saves: the first reader still answers as before.
        index.remove_documents([2])
        corpus.remove(2)
        index.remove_documents([1])
        index.add(corpus.document(1, unit(300, 77)))
        second = self.persist(index, tmp_path)
        assert reader.search(q, 10)[0].tolist() == before
        again = self.reopen(tmp_path, second)
        assert again.search(q, 10)[0].tolist() == corpus.exact(q, 10)[0]
        assert len(again) == len(corpus.vectors) == 900

    def test_everything_removed_leaves_an_empty_index(self, tmp_path: Path) -> None:
        index = self.make()
        index.add(batch(1, 1, unit(20, 1)))
        index.remove_documents([1])
        assert len(index) == 0 and index.search(unit(1, 1)[0], 5)[0].tolist() == []
        reopened = self.reopen(tmp_path, self.persist(index, tmp_path))
        assert len(reopened) == 0 and reopened.search(unit(1, 1)[0], 5)[0].tolist() == []


class LexicalIndexContract(Durable):
    index_type: Any = None

    def make(self) -> Any:
        return self.index_type()

    @staticmethod
    def assert_reference_scores(index: Any, corpus: Corpus) -> None:
        """Every positive score equals the reference formula over the live texts to 1e-9, and nothing else scores."""
        ids = sorted(corpus.texts)
        reference = BM25([corpus.texts[i] for i in ids])
        for query in BM25_FIXTURE["queries"][:40]:
            got_ids, got = index.search(query, len(ids))
            expected = reference.scores(query)
            want = {ids[j]: expected[j] for j in np.flatnonzero(expected > 0)}
            assert set(got_ids.tolist()) == set(want)
            for cid, score in zip(got_ids.tolist(), got.tolist(), strict=True):
                assert abs(score - want[cid]) <= 1e-9
            assert list(got) == sorted(got, reverse=True)

    def test_scores_equal_the_published_reference(self) -> None:
        docs = BM25_FIXTURE["docs"]
        index = self.make()
        index.add(batch(1, 0, unit(len(docs), 1), docs))
        worst = 0.0
        for query, expected in zip(BM25_FIXTURE["queries"], BM25_FIXTURE["scores"], strict=True):
            ids, scores = index.search(query, len(docs))
            full = np.zeros(len(docs))
            full[ids] = scores
            worst = max(worst, float(np.max(np.abs(full - np.asarray(expected)))))
        assert worst <= 1e-9

    def test_updates_per_document_keep_reference_scores(self, tmp_path: Path) -> None:
        docs = BM25_FIXTURE["docs"]
        corpus, index = Corpus(), self.make()
        parts = [docs[i:i + 25] for i in range(0, len(docs), 25)]
        for doc, texts in enumerate(parts[:6]):
            index.add(corpus.document(doc, unit(len(texts), doc), texts))
        self.assert_reference_scores(index, corpus)
        index = self.reopen(tmp_path, self.persist(index, tmp_path))
        for doc in (1, 4):
            index.remove_documents([doc])
            corpus.remove(doc)
        index.remove_documents([2])
        index.add(corpus.document(2, unit(len(parts[7]), 7), parts[7]))  # a new version of document 2
        self.assert_reference_scores(index, corpus)
        index = self.reopen(tmp_path, self.persist(index, tmp_path))
        self.assert_reference_scores(index, corpus)

    def test_query_mass_is_the_idf_sum_of_the_query_terms_over_the_live_chunks(self, tmp_path: Path) -> None:
        docs = BM25_FIXTURE["docs"]
        corpus, index = Corpus(), self.make()
        assert index.query_mass("anything at all") == 0.0  # an empty index
        for doc in range(4):
            index.add(corpus.document(doc, unit(30, doc), docs[doc * 30:(doc + 1) * 30]))
        index = self.reopen(tmp_path, self.persist(index, tmp_path))
        index.remove_documents([1])
        corpus.remove(1)
        reference = BM25([corpus.texts[i] for i in sorted(corpus.texts)])
        n = len(corpus.texts)
        for query in [*BM25_FIXTURE["queries"][:20], "zqxjv wqpzk", "the the kernel"]:
            assert abs(index.query_mass(query) - reference.query_mass(query)) <= 1e-9
        # A word no chunk holds counts at df = 0, the most a word can weigh; a repeated word counts again.
        assert index.query_mass("zqxjv") == pytest.approx(math.log(1 + (n + 0.5) / 0.5))
        assert index.query_mass("zqxjv zqxjv") == pytest.approx(2 * index.query_mass("zqxjv"))
        assert index.query_mass("") == 0.0
        # BM25 / mass: a chunk of average length holding each query word once scores about the mass.
        ids, scores = index.search(BM25_FIXTURE["queries"][0], 1)
        assert 0 < scores[0] / index.query_mass(BM25_FIXTURE["queries"][0]) < 3

    def test_a_reader_of_an_older_state_is_undisturbed(self, tmp_path: Path) -> None:
        docs = BM25_FIXTURE["docs"]
        corpus, index = Corpus(), self.make()
        for doc in range(4):
            index.add(corpus.document(doc, unit(30, doc), docs[doc * 30:(doc + 1) * 30]))
        reader = self.reopen(tmp_path, self.persist(index, tmp_path))
        before = [reader.search(q, 20)[0].tolist() for q in BM25_FIXTURE["queries"][:20]]
        for doc in range(3):  # most rows die: the writer compacts and merges into new files
            index.remove_documents([doc])
        self.persist(index, tmp_path)
        assert [reader.search(q, 20)[0].tolist() for q in BM25_FIXTURE["queries"][:20]] == before

    def test_a_filtered_search_ranks_the_allowed_chunks_by_the_collections_scores(self, tmp_path: Path) -> None:
        """Scores stay the whole collection's (N, df, mean length over every live chunk), so a filtered search
        returns exactly the unfiltered ranking's allowed chunks, however deep they sit in it."""
        docs = BM25_FIXTURE["docs"]
        corpus, index = Corpus(), self.make()
        for doc in range(6):
            index.add(corpus.document(doc, unit(30, doc), docs[doc * 30:(doc + 1) * 30]))
        index.remove_documents([5])
        corpus.remove(5)
        for _ in range(2):
            for documents in ({1}, {0, 4}, {0, 1, 2, 3}, {5}, set()):
                chunks = {i for d in documents for i in corpus.ids.get(d, [])}
                for query in BM25_FIXTURE["queries"][:25]:
                    ids, scores = index.search(query, 10, allowed(corpus, documents))
                    all_ids, all_scores = index.search(query, len(corpus.texts))
                    keep = [j for j, i in enumerate(all_ids.tolist()) if i in chunks][:10]
                    assert ids.tolist() == all_ids[keep].tolist(), (query, documents)
                    np.testing.assert_allclose(scores, all_scores[keep], rtol=0, atol=1e-9)
            index = self.reopen(tmp_path, self.persist(index, tmp_path))

    def test_for_a_reader_of_some_documents_the_others_change_no_score(self, tmp_path: Path) -> None:
        """Document permissions (Allowed.visible): N, df and the mean length are those of the documents the caller
        may read, so its scores, ranking and query mass are exactly the reference's over those documents alone, as
        if the others did not exist; filters within them rank as usual."""
        docs = BM25_FIXTURE["docs"]
        corpus, index = Corpus(), self.make()
        for doc in range(6):
            index.add(corpus.document(doc, unit(30, doc), docs[doc * 30:(doc + 1) * 30]))
        index.remove_documents([5])
        corpus.remove(5)
        for _ in range(2):
            for visible, documents in (({0, 2}, {0, 2}), ({1, 3, 4}, {3}), ({0}, {0}), ({0, 1, 2, 3}, {1, 2})):
                seen = sorted(i for d in visible for i in corpus.ids[d])
                reference = BM25([corpus.texts[i] for i in seen])
                limit = Allowed.of(documents, sum(len(corpus.ids[d]) for d in documents), visible)
                chunks = {i for d in documents for i in corpus.ids[d]}
                for query in [*BM25_FIXTURE["queries"][:25], "zqxjv kernel"]:
                    expected = reference.scores(query)
                    ranked = sorted(((-expected[j], i) for j, i in enumerate(seen) if i in chunks and expected[j] > 0))
                    ids, scores = index.search(query, 10, limit)
                    assert ids.tolist() == [i for _, i in ranked[:10]], (query, visible, documents)
                    np.testing.assert_allclose(scores, [-s for s, _ in ranked[:10]], rtol=0, atol=1e-9)
                    assert abs(index.query_mass(query, limit) - reference.query_mass(query)) <= 1e-9
            index = self.reopen(tmp_path, self.persist(index, tmp_path))

    def test_nothing_matches_nothing(self) -> None:
        index = self.make()
        assert index.search("anything", 5)[0].tolist() == []
        index.add(batch(1, 1, unit(2, 1), ["the cat sat", "the dog"]))
        assert index.search("bird", 5)[0].tolist() == []
        assert index.search("cat", 5)[0].tolist() == [1]
