"""What every store backend must do, as one test class each backend's test module subclasses.

    class TestSqliteStore(StoreContract):
        write_error = sqlite3.IntegrityError   # what the database raises on a NOT NULL violation

        @pytest.fixture()
        def make_store(self, tmp_path): ...  # make_store(name, create=True) -> Store

`make_store` called twice with the same name opens the same store through a second connection, as another
process would. The documents are real text (Debian Reference sections), cut into paragraphs at offsets found
in the text, as the chunkers do; the vectors are random unit vectors of dimension 8.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

from citerag.errors import CiteragError, Superseded
from citerag.refusal import RefusalRule
from citerag.store import ChunkStats, Store
from citerag.store.conversations import NotYours
from citerag.types import Chunk, Experiment, Facets, Label, Locator, SourceInfo, SourceItem, Turn
from corpus_paths import DATA

MakeStore = Callable[..., Store]
DIM = 8
MODEL = "test-encoder-8d"


@dataclass
class RealDocument:
    path: str
    name: str
    title: str
    text: str
    chunks: list[Chunk]
    vectors: np.ndarray
    locators: list[Locator]

    @property
    def stats(self) -> ChunkStats:
        return ChunkStats([len(c.text) // 4 for c in self.chunks], [len(c.header) // 4 for c in self.chunks])


def unit_vectors(n: int, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def real_document(chapter: str, number: str, seed: int = 0) -> RealDocument:
    """Section `number` ("1.1.3.") of a Debian Reference chapter, one chunk per paragraph."""
    source = (DATA / "markdown" / "debian-reference" / chapter).read_text(encoding="utf-8")
    start = source.index(f"\n### {number}") + 1
    end = source.find("\n### ", start)
    text = source[start:end + 1 if end >= 0 else len(source)]
    section = text[:text.index("\n")].lstrip("# ")
    title = source[source.index("\n# ") + 3:].split("\n", 1)[0]
    chunks: list[Chunk] = []
    cursor = text.index("\n") + 1
    for para in (p.strip() for p in text[cursor:].split("\n\n")):
        if not para:
            continue
        begin = text.index(para, cursor)
        cursor = begin + len(para)
        header = f"[{title} > {section}]"
        chunks.append(Chunk(f"{header}\n{para}", para, section, begin, cursor, header))
    middle = text.index("\n\n", len(text) // 2) + 2  # as if printed on two pages
    locators = [Locator(0, middle, page=7), Locator(middle, len(text), page=8)]
    name = f"{chapter.removesuffix('.md')}-{number.rstrip('.')}.md"
    return RealDocument(f"/srv/docs/debian-reference/{name}", name, title, text, chunks,
                        unit_vectors(len(chunks), seed), locators)


ROOT_ACCOUNT = real_document("ch01.md", "1.1.3.", seed=1)
LAN_RANGES = real_document("ch05.md", "5.1.3.", seed=2)
MTU = real_document("ch05.md", "5.5.1.", seed=3)


def save(store: Store, doc_id: int, doc: RealDocument, model: str = MODEL, *, sha256: str = "s1",
         chunks: list[Chunk] | None = None, vectors: np.ndarray | None = None, replaces: str | None = None) -> None:
    chunks = doc.chunks if chunks is None else chunks
    store.save_indexed(doc_id, title=doc.title, sha256=sha256, stamps={"embedding_model": model, "strategy": "E",
                                                                       "extractor": "markdown", "language": "en"},
                       canonical_text=doc.text, warnings=[], chunks=chunks,
                       vectors=doc.vectors[:len(chunks)] if vectors is None else vectors,
                       stats=ChunkStats([5] * len(chunks), [2] * len(chunks)), locators=doc.locators,
                       replaces=replaces)


def add(store: Store, doc: RealDocument, model: str = MODEL) -> int:
    doc_id = store.add_pending(doc.path, doc.name, "s0")
    save(store, doc_id, doc, model)
    return doc_id


class StoreContract:
    write_error: type[BaseException] = Exception  # what a NOT NULL violation raises in this backend

    @pytest.fixture()
    def make_store(self) -> MakeStore:
        raise NotImplementedError("a backend's test class provides make_store(name, create=True) -> Store")

    def test_a_new_store_is_empty(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        assert store.documents() == [] and store.chunk_stats() == {}
        snap = store.snapshot(MODEL)
        assert snap.chunks == [] and snap.documents == {} and snap.texts == {} and len(snap.vectors) == 0
        assert snap.generation == store.generation()

    def test_pending_documents_are_listed_by_path(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        ids = {path: store.add_pending(path, path.rsplit("/", 1)[1], f"sha-{path}")
               for path in ("/docs/b.md", "/docs/a/z.md", "/docs/c.pdf")}
        assert len(set(ids.values())) == 3
        assert [d.source_path for d in store.documents()] == ["/docs/a/z.md", "/docs/b.md", "/docs/c.pdf"]
        doc = store.document(ids["/docs/b.md"])
        assert doc is not None and (doc.status, doc.name, doc.sha256, doc.chunk_count, doc.error) == \
            ("pending", "b.md", "sha-/docs/b.md", 0, None)
        assert store.document_by_path("/docs/c.pdf") == store.documents()[2]
        assert store.document(max(ids.values()) + 100) is None and store.document_by_path("/nowhere") is None
        with pytest.raises(CiteragError, match="no indexed text"):
            store.canonical_text(ids["/docs/b.md"])

    def test_an_indexed_document_round_trips(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc_id = store.add_pending(ROOT_ACCOUNT.path, ROOT_ACCOUNT.name, "s0")
        store.save_indexed(doc_id, title=ROOT_ACCOUNT.title, sha256="s1", stamps={"embedding_model": MODEL, "n": 1},
                           canonical_text=ROOT_ACCOUNT.text, warnings=["a table was flattened"],
                           chunks=ROOT_ACCOUNT.chunks, vectors=ROOT_ACCOUNT.vectors, stats=ROOT_ACCOUNT.stats,
                           locators=ROOT_ACCOUNT.locators)
        doc = store.document(doc_id)
        assert doc is not None
        assert (doc.status, doc.title, doc.sha256, doc.error, doc.chunk_count, doc.warnings, doc.stamps) == \
            ("indexed", ROOT_ACCOUNT.title, "s1", None, len(ROOT_ACCOUNT.chunks),
             ["a table was flattened"], {"embedding_model": MODEL, "n": 1})
        assert doc.locators == ROOT_ACCOUNT.locators == store.locators(doc_id)
        assert store.canonical_text(doc_id) == ROOT_ACCOUNT.text
        stats = store.chunk_stats()[doc_id]
        assert (stats.tokens, stats.header_tokens) == (ROOT_ACCOUNT.stats.tokens, ROOT_ACCOUNT.stats.header_tokens)
        snap = store.snapshot(MODEL)
        assert [(c.content, c.text, c.section, c.start, c.end, c.ordinal) for c in snap.chunks] == \
            [(c.content, c.text, c.section, c.start, c.end, i) for i, c in enumerate(ROOT_ACCOUNT.chunks)]
        np.testing.assert_array_equal(snap.vectors, ROOT_ACCOUNT.vectors)
        assert snap.vectors.dtype == np.float32
        assert snap.documents[doc_id].locators == ROOT_ACCOUNT.locators

    def test_a_views_facets_are_its_indexed_documents_as_of_its_commit(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        first = add(store, ROOT_ACCOUNT)
        pending = store.add_pending("/docs/pending.md", "pending.md", "p")
        added: list[int] = []
        with store.view() as view:
            view.facets()
            # Committed by another thread after the view began: not in it.
            writer = threading.Thread(target=lambda: added.append(add(store, LAN_RANGES)))
            writer.start()
            writer.join()
            listed = view.facets()
            assert [d.id for d in listed] == [first]
            # What a filter reads: the stored path, the chunks, the format and language stamped, when, the tags.
            assert listed[0] == Facets(first, ROOT_ACCOUNT.path, len(ROOT_ACCOUNT.chunks), "markdown", "en",
                                       store.document(first).updated_at, ())  # type: ignore[union-attr]
        with store.view() as view:
            assert [d.id for d in view.facets()] == sorted([first, *added]) and pending not in \
                {d.id for d in view.facets()}

    def test_tags_are_replaced_whole_kept_by_new_versions_and_a_change(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc_id = add(store, ROOT_ACCOUNT)
        assert store.document(doc_id).tags == []  # type: ignore[union-attr]
        generation = store.generation()
        assert store.set_tags(doc_id, ["runbook", "sre"]) is True
        assert store.generation() == generation + 1  # cached results of filtered searches are not found again
        with store.view() as view:
            assert view.changed_documents(generation) == [doc_id]
            assert [d.tags for d in view.facets()] == [("runbook", "sre")]
            assert view.documents([doc_id])[doc_id].tags == ["runbook", "sre"]
        save(store, doc_id, LAN_RANGES, sha256="s2")  # a new version of the document keeps its tags
        assert store.documents()[0].tags == ["runbook", "sre"]
        assert store.set_tags(doc_id, []) is True and store.document(doc_id).tags == []  # type: ignore[union-attr]
        assert store.set_tags(doc_id + 100, ["x"]) is False

    def test_groups_change_in_one_generation_and_outlive_a_new_version(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc_id = add(store, ROOT_ACCOUNT)
        assert store.document(doc_id).groups == []  # type: ignore[union-attr]  # everyone, by default
        generation = store.generation()
        assert store.set_groups(doc_id, ["hr", "sre"]) is True
        assert store.generation() == generation + 1  # no cached result of before the change is found after it
        with store.view() as view:
            assert view.changed_documents(generation) == [doc_id]
            assert [d.groups for d in view.facets()] == [("hr", "sre")]
            assert view.documents([doc_id])[doc_id].groups == ["hr", "sre"]
        save(store, doc_id, LAN_RANGES, sha256="s2")
        assert store.documents()[0].groups == ["hr", "sre"]
        assert store.set_groups(doc_id, []) is True and store.document(doc_id).groups == []  # type: ignore[union-attr]
        assert store.set_groups(doc_id + 100, ["x"]) is False

    def test_a_reindex_replaces_the_version_whole(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc_id = add(store, ROOT_ACCOUNT)
        save(store, doc_id, LAN_RANGES, sha256="s2")  # the same file now holds other text
        assert store.canonical_text(doc_id) == LAN_RANGES.text
        snap = store.snapshot(MODEL)
        assert [c.content for c in snap.chunks] == [c.content for c in LAN_RANGES.chunks]
        assert store.chunk_stats()[doc_id].tokens == [5] * len(LAN_RANGES.chunks)
        assert store.locators(doc_id) == LAN_RANGES.locators
        save(store, doc_id, LAN_RANGES, chunks=[])  # a document with no text left keeps no chunks
        assert store.snapshot(MODEL).chunks == [] and store.document(doc_id).chunk_count == 0  # type: ignore[union-attr]

    def test_a_rebuild_of_a_version_never_overwrites_a_newer_one(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc_id = add(store, ROOT_ACCOUNT)  # version s1
        save(store, doc_id, LAN_RANGES, sha256="s2")  # a newer version committed while s1 was being rebuilt
        generation = store.generation()
        with pytest.raises(Superseded):
            save(store, doc_id, ROOT_ACCOUNT, sha256="s1", replaces="s1")
        assert store.canonical_text(doc_id) == LAN_RANGES.text and store.document(doc_id).sha256 == "s2"  # type: ignore[union-attr]
        assert store.generation() == generation
        save(store, doc_id, LAN_RANGES, sha256="s2", replaces="s2")  # the version it still has: saved
        assert store.generation() > generation

    def test_snapshot_texts_agree_with_every_chunk(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        ids = [add(store, doc) for doc in (MTU, ROOT_ACCOUNT, LAN_RANGES)]
        snap = store.snapshot(MODEL)
        assert set(snap.texts) == set(snap.documents) == set(ids)
        assert len(snap.chunks) == len(snap.vectors) == sum(len(d.chunks) for d in (MTU, ROOT_ACCOUNT, LAN_RANGES))
        for chunk in snap.chunks:
            assert snap.texts[chunk.document_id][chunk.start:chunk.end] == chunk.content
        # Chunks come in a fixed order, vectors row for row.
        assert [(c.document_id, c.ordinal) for c in snap.chunks] == sorted((c.document_id, c.ordinal)
                                                                           for c in snap.chunks)
        np.testing.assert_allclose(np.linalg.norm(snap.vectors, axis=1), 1.0, atol=1e-5)
        assert snap.generation == store.generation()

    def test_snapshot_never_mixes_embedding_models(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        a = add(store, ROOT_ACCOUNT, model="m1")
        b = add(store, LAN_RANGES, model="m2")
        store.add_pending("/docs/pending.md", "pending.md", "s")
        failed = store.add_pending("/docs/bad.pdf", "bad.pdf", "s")
        store.save_failed(failed, sha256="s", stamps={"embedding_model": "m1"}, error="encrypted PDF")
        snap = store.snapshot("m1")
        assert set(snap.documents) == set(snap.texts) == {a} and snap.excluded_documents == 1
        assert {c.document_id for c in snap.chunks} == {a}
        snap2 = store.snapshot("m2")
        assert set(snap2.documents) == {b} and snap2.excluded_documents == 1
        assert store.snapshot("m3").excluded_documents == 2 and store.snapshot("m3").chunks == []

    def test_vectors_must_be_unit_length_and_one_per_chunk(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc_id = store.add_pending(ROOT_ACCOUNT.path, ROOT_ACCOUNT.name, "s0")
        before = store.generation()
        with pytest.raises(ValueError, match="unit length"):
            save(store, doc_id, ROOT_ACCOUNT, vectors=ROOT_ACCOUNT.vectors * 2)
        with pytest.raises(ValueError, match="one vector per chunk"):
            save(store, doc_id, ROOT_ACCOUNT, vectors=ROOT_ACCOUNT.vectors[:1])
        assert store.document(doc_id).status == "pending" and store.generation() == before  # type: ignore[union-attr]

    def test_a_failing_write_leaves_the_previous_version_whole(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc = add(store, ROOT_ACCOUNT)
        before = store.generation()
        # The second chunk violates NOT NULL inside the transaction: nothing of the new version may show.
        bad = [LAN_RANGES.chunks[0], Chunk("x", None, "", 0, 1)]  # type: ignore[arg-type]
        with pytest.raises(self.write_error):
            save(store, doc, LAN_RANGES, chunks=bad)
        snap = store.snapshot(MODEL)
        assert [c.content for c in snap.chunks] == [c.content for c in ROOT_ACCOUNT.chunks]
        assert snap.texts[doc] == ROOT_ACCOUNT.text and store.locators(doc) == ROOT_ACCOUNT.locators
        assert store.document(doc).chunk_count == len(ROOT_ACCOUNT.chunks)  # type: ignore[union-attr]
        assert store.generation() == before
        # A second connection (another process) sees the same.
        assert make_store("ix", create=False).snapshot(MODEL).vectors.shape == (len(ROOT_ACCOUNT.chunks), DIM)

    def test_failed_documents_keep_their_reason_and_lose_their_chunks(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc = add(store, ROOT_ACCOUNT)
        store.save_failed(doc, sha256="s2", stamps={"extractor": "markdown"}, error="binary data, not text")
        d = store.document(doc)
        assert d is not None and (d.status, d.error, d.chunk_count, d.sha256, d.stamps, d.locators) == \
            ("failed", "binary data, not text", 0, "s2", {"extractor": "markdown"}, [])
        assert store.snapshot(MODEL).chunks == [] and store.chunk_stats() == {}
        with pytest.raises(CiteragError, match="no indexed text"):
            store.canonical_text(doc)
        save(store, doc, ROOT_ACCOUNT)  # a retry that works clears the reason
        assert store.document(doc).error is None  # type: ignore[union-attr]

    def test_set_error_keeps_the_served_version(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        doc = add(store, ROOT_ACCOUNT)
        old = store.document(doc)
        before = store.generation()
        store.set_error(doc, "re-index failed: the new file is not UTF-8")
        new = store.document(doc)
        assert new is not None and old is not None
        assert new.error == "re-index failed: the new file is not UTF-8" and store.generation() > before
        assert (new.status, new.sha256, new.stamps, new.chunk_count, new.title, new.locators, new.updated_at) == \
            (old.status, old.sha256, old.stamps, old.chunk_count, old.title, old.locators, old.updated_at)
        assert store.canonical_text(doc) == ROOT_ACCOUNT.text
        snap = store.snapshot(MODEL)
        assert [c.content for c in snap.chunks] == [c.content for c in ROOT_ACCOUNT.chunks]
        assert snap.documents[doc].error == new.error  # search still serves it, and can say why it is old
        store.set_error(doc, None)
        assert store.document(doc).error is None  # type: ignore[union-attr]
        store.set_error(doc, "again")
        save(store, doc, ROOT_ACCOUNT)
        assert store.document(doc).error is None  # type: ignore[union-attr]

    def test_chunk_ids_are_never_reused(self, make_store: MakeStore) -> None:
        """Search indexes key vectors by chunk id: a new version, or a document added after the newest was
        deleted, gets ids never given before."""
        store = make_store("ix")
        a = add(store, ROOT_ACCOUNT)
        b = add(store, LAN_RANGES)
        seen = {c.id for c in store.snapshot(MODEL).chunks}
        store.delete(b)
        save(store, a, ROOT_ACCOUNT, sha256="s2")
        add(store, MTU)
        ids = {ch.id for ch in store.snapshot(MODEL).chunks}
        assert len(ids) == len(ROOT_ACCOUNT.chunks) + len(MTU.chunks) and not ids & seen

    def test_delete_takes_the_chunks_along(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        a, b = add(store, ROOT_ACCOUNT), add(store, LAN_RANGES)
        store.delete(a)
        assert store.document(a) is None and [d.id for d in store.documents()] == [b]
        assert set(store.chunk_stats()) == {b} and {c.document_id for c in store.snapshot(MODEL).chunks} == {b}
        # The path is free again.
        assert store.add_pending(ROOT_ACCOUNT.path, ROOT_ACCOUNT.name, "s") not in (a, b)

    def test_generation_moves_with_every_change_and_only_then(self, make_store: MakeStore) -> None:
        store = make_store("ix")
        seen = [store.generation()]

        def changed() -> None:
            seen.append(store.generation())
            assert seen[-1] > seen[-2], seen

        doc = store.add_pending(ROOT_ACCOUNT.path, ROOT_ACCOUNT.name, "s0")
        changed()
        save(store, doc, ROOT_ACCOUNT)
        changed()
        store.set_error(doc, "newer version failed")
        changed()
        save(store, doc, ROOT_ACCOUNT, sha256="s2")
        changed()
        store.save_failed(doc, sha256="s3", stamps={}, error="gone bad")
        changed()
        store.delete(doc)
        changed()
        # Reads leave it alone.
        store.documents()
        store.document(doc)
        store.document_by_path(ROOT_ACCOUNT.path)
        store.chunk_stats()
        store.locators(doc)
        snap = store.snapshot(MODEL)
        assert store.generation() == seen[-1] == snap.generation
        # Another connection sees the same counter, and the first sees the other's changes.
        other = make_store("ix", create=False)
        assert other.generation() == seen[-1]
        add(other, LAN_RANGES)
        assert store.generation() > seen[-1] and store.snapshot(MODEL).generation == other.generation()

    def test_one_store_serves_several_threads(self, make_store: MakeStore) -> None:
        """A service answers from a pool of threads over one open store: writers and readers at once."""
        import threading

        store = make_store("ix")
        docs = [ROOT_ACCOUNT, LAN_RANGES, MTU]
        ids = [add(store, doc) for doc in docs]
        errors: list[BaseException] = []
        done = threading.Event()

        def write(i: int) -> None:
            try:
                for round_ in range(10):  # each thread swaps its own document between two versions
                    save(store, ids[i], docs[(i + round_) % len(docs)], sha256=f"s{round_}")
            except BaseException as exc:  # noqa: BLE001 - every failure counts
                errors.append(exc)

        def read() -> None:
            try:
                while not done.is_set():
                    snap = store.snapshot(MODEL)
                    for c in snap.chunks:
                        assert snap.texts[c.document_id][c.start:c.end] == c.content
                    assert len(store.documents()) == len(docs)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        writers = [threading.Thread(target=write, args=(i,)) for i in range(len(docs))]
        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join(timeout=120)
        done.set()
        for t in readers:
            t.join(timeout=120)
        assert errors == []
        final = store.snapshot(MODEL)
        assert {d.id for d in final.documents.values()} == set(ids)
        store.close()
        with pytest.raises(CiteragError, match="closed"):
            store.documents()

    def test_a_refusal_rule_is_kept_per_encoder_and_replaced_whole(self, make_store: MakeStore) -> None:
        store = make_store("rules")
        add(store, ROOT_ACCOUNT)
        generation = store.generation()
        assert store.refusal_rule(MODEL) is None
        first = RefusalRule(threshold=0.561, encoder=MODEL, fitted_at="2024-01-01T00:00:00+00:00", documents=1,
                            chunks=3, synthetic=200, synthetic_refused=15, bank=219, bank_answered=8,
                            cost_ratio=3.0, seed=13, synthetic_best=[0.1, 0.4, 0.7], bank_best=[0.4, 0.7, 0.9])
        store.save_refusal_rule(MODEL, first.to_json())
        other = RefusalRule.from_json(first.to_json())
        other.encoder, other.threshold = "another-encoder", 0.25
        store.save_refusal_rule("another-encoder", other.to_json())
        again = make_store("rules", create=False)  # another process sees it
        kept = again.refusal_rule(MODEL)
        assert kept is not None and RefusalRule.from_json(kept) == first
        assert RefusalRule.from_json(again.refusal_rule("another-encoder") or "{}").threshold == 0.25
        first.threshold, first.documents = 0.5, 2
        store.save_refusal_rule(MODEL, first.to_json())
        assert RefusalRule.from_json(again.refusal_rule(MODEL) or "{}") == first
        assert make_store("other-collection").refusal_rule(MODEL) is None  # a rule belongs to its collection
        assert store.generation() == generation  # saving a rule changes no document

    def test_a_conversation_keeps_its_turns_in_order_for_its_owner_only(self, make_store: MakeStore) -> None:
        store = make_store("talks")
        add(store, ROOT_ACCOUNT)
        generation = store.generation()
        quote = {"index": 1, "document_name": ROOT_ACCOUNT.name, "quote": ROOT_ACCOUNT.chunks[0].content}
        first = store.add_turn("c-1", "key-a", Turn("Why should I not log in as root?", "Why should I not log in as "
                                                    "root?", "Because [1].", False, [quote], "trace-1"))
        second = store.add_turn("c-1", "key-a", Turn("And how do I avoid it?", "root account\nAnd how do I avoid it?",
                                                     "No source says so.", True, []))
        assert (first.n, second.n) == (1, 2) and first.created_at <= second.created_at
        store.add_turn("c-2", "key-b", Turn("What is an MTU?", "What is an MTU?", "", True, []))
        again = make_store("talks", create=False)  # another connection (another process) reads the same rows
        found = again.conversation("c-1")
        assert found is not None
        summary, turns = found
        assert (summary.id, summary.owner, summary.title, summary.turns) == \
            ("c-1", "key-a", "Why should I not log in as root?", 2)
        assert [(t.n, t.question, t.query, t.refused, t.trace_id) for t in turns] == [
            (1, "Why should I not log in as root?", "Why should I not log in as root?", False, "trace-1"),
            (2, "And how do I avoid it?", "root account\nAnd how do I avoid it?", True, None)]
        assert turns[0].citations == [quote] and turns[0].answer == "Because [1]."
        assert [c.id for c in again.conversations("key-a")] == ["c-1"]
        assert [c.id for c in again.conversations("key-b")] == ["c-2"]
        assert again.conversations("key-c") == []
        with pytest.raises(NotYours):  # another owner cannot add to it, and nothing is written
            again.add_turn("c-1", "key-b", Turn("Mine now?", "Mine now?", "", True, []))
        assert again.conversation("c-1")[1][-1].n == 2  # type: ignore[index]
        assert make_store("other-collection").conversation("c-1") is None  # a conversation belongs to its collection
        assert store.generation() == generation  # asking changes no document

    def test_a_label_is_kept_per_trace_and_replaced_when_labelled_again(self, make_store: MakeStore) -> None:
        store = make_store("labelled")
        doc = add(store, ROOT_ACCOUNT)
        generation = store.generation()
        needle = ROOT_ACCOUNT.chunks[0].content[:40]
        first = store.add_label(Label("b" * 32, "Why not log in as root?", "needle", doc, 0, 40, needle, "key-a",
                                      asked_at=200.0))
        store.add_label(Label("a" * 32, "What is a hot pot broth?", "ood", by="local", asked_at=100.0))
        assert first.labelled_at and first.needle == needle
        again = make_store("labelled", create=False)  # another connection reads the same rows
        kept = [(x.trace_id, x.kind, x.document_id, x.start, x.end, x.needle, x.by, x.asked_at) for x in again.labels()]
        assert kept == [("a" * 32, "ood", None, None, None, "", "local", 100.0),
                ("b" * 32, "needle", doc, 0, 40, needle, "key-a", 200.0)]  # in the order asked
        again.add_label(Label("b" * 32, "Why not log in as root?", "ood", by="key-b", asked_at=200.0))
        assert [(x.trace_id, x.kind, x.by) for x in store.labels()] == [("a" * 32, "ood", "local"),
                                                                         ("b" * 32, "ood", "key-b")]
        assert make_store("other-collection").labels() == []  # labels belong to their collection
        assert store.generation() == generation  # labelling changes no document

    def test_one_experiment_runs_at_a_time_and_stays_listed_once_stopped(self, make_store: MakeStore) -> None:
        store = make_store("tried")
        generation = store.generation()
        first = store.start_experiment(Experiment("rerank", {}, {"mode": "bm25", "k": 10}, 0.5, "key"))
        assert first.started_at and first.stopped_at is None
        with pytest.raises(CiteragError, match="experiment 'rerank' is running: stop it first"):
            store.start_experiment(Experiment("other", {}, {"mode": "dense"}, 0.2, "conversation"))
        again = make_store("tried", create=False)  # another process sees it at once
        assert [(e.name, e.a, e.b, e.split, e.sticky, e.stopped_at) for e in again.experiments()] == \
            [("rerank", {}, {"mode": "bm25", "k": 10}, 0.5, "key", None)]
        stopped = again.stop_experiment()
        assert stopped is not None and stopped.name == "rerank" and stopped.stopped_at
        assert again.stop_experiment() is None  # none runs
        with pytest.raises(CiteragError, match="ran before"):
            store.start_experiment(Experiment("rerank", {}, {"mode": "dense"}, 0.5, "key"))
        store.start_experiment(Experiment("dense", {"mode": "hybrid"}, {"mode": "dense"}, 0.1, "conversation"))
        assert [(e.name, e.stopped_at is None) for e in store.experiments()] == [("dense", True), ("rerank", False)]
        assert make_store("other-collection").experiments() == []  # experiments belong to their collection
        assert store.generation() == generation

    def test_a_source_its_records_and_its_lease(self, make_store: MakeStore) -> None:
        store = make_store("synced")
        doc = add(store, ROOT_ACCOUNT)
        generation = store.generation()
        added = store.put_source(SourceInfo("docs", "git", "git://127.0.0.1/docs", {"globs": ["**/*.md"]}, 60.0),
                                 create=True)
        assert added.created_at
        with pytest.raises(CiteragError, match="exists"):
            store.put_source(SourceInfo("docs", "web", "https://example.org/"), create=True)
        with pytest.raises(CiteragError, match="no source named 'nope'"):
            store.put_source(SourceInfo("nope", "web", "https://example.org/"))
        added.status = {"last_success": 1700000000.5, "failures": 0, "last": {"added": 1}}
        store.put_source(added)
        again = make_store("synced", create=False)  # another process reads the same rows
        [seen] = again.sources()
        assert (seen.name, seen.kind, seen.options, seen.interval_s, seen.status, seen.created_at) == \
            ("docs", "git", {"globs": ["**/*.md"]}, 60.0, added.status, added.created_at)
        # One holder at a time: a second is told who holds it, until it is let go or taken from a dead holder.
        assert store.lease_source("docs", "host:1:1", 60) is None
        assert again.lease_source("docs", "host:2:1", 60) == "host:1:1"
        assert store.lease_source("docs", "host:1:1", 60) is None  # renewed by its holder
        assert again.lease_source("docs", "host:2:1", 60, take_from="host:1:1") is None
        assert store.lease_source("docs", "host:1:1", 60) == "host:2:1"
        assert again.lease_source("docs", "host:2:1", 0) is None  # let go
        assert store.lease_source("docs", "host:1:1", 60) is None
        store.set_source_item("docs", "a.md", SourceItem("a.md", "blob-1", doc, "https://forge/a.md", "a.md at 1"))
        store.set_source_item("docs", "a.md", SourceItem("a.md", "blob-2", doc, "https://forge/a.md", "a.md at 2"))
        assert again.source_items("docs") == [SourceItem("a.md", "blob-2", doc, "https://forge/a.md", "a.md at 2")]
        assert again.source_records([doc, doc + 1000]) == {doc: again.source_items("docs")[0]}
        assert make_store("other-collection").sources() == []  # sources belong to their collection
        assert make_store("other-collection").source_records([doc]) == {}
        store.set_source_item("docs", "a.md", None)
        assert store.source_items("docs") == []
        store.set_source_item("docs", "b.md", SourceItem("b.md", "blob-3", doc))
        assert store.remove_source("docs") is True and store.remove_source("docs") is False
        assert store.sources() == [] and store.source_items("docs") == []
        assert store.generation() == generation  # a source's records are not documents

    def test_a_deleted_conversation_is_gone_with_its_turns(self, make_store: MakeStore) -> None:
        store = make_store("talks")
        store.add_turn("c-1", "key-a", Turn("What is an MTU?", "What is an MTU?", "", True, []))
        store.add_turn("c-1", "key-a", Turn("And on a VPN?", "And on a VPN?", "", True, []))
        assert store.delete_conversation("c-1") is True
        assert store.conversation("c-1") is None and store.conversations("key-a") == []
        assert store.delete_conversation("c-1") is False
        # The id can start afresh, numbered from 1: no turn of the old one is left behind.
        assert store.add_turn("c-1", "key-a", Turn("Again?", "Again?", "", True, [])).n == 1
