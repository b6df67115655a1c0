"""BM25 postings that persist and update per document, scoring exactly as the reference formula.

Postings live in immutable segments (term -> rows, term frequencies, as CSR arrays, memory-mapped once
saved); new documents go to an in-memory segment that `save` writes as a new one; segments of similar size
are merged so that a million chunks stay in a handful of segments. Removal tombstones rows. Nothing derived
from the collection as a whole (N, document frequencies, the mean length) is stored: every query computes
them over the live rows, so a score after any sequence of updates equals a fresh build's to the last bit.

Hand-written, as `citerag.search.bm25` is, because conformance to the reference's tokens and weights is the
contract; here it is the incremental, persisted form of the same formula. The terms come from the index's
analyzer (citerag.index.analyzer: the reference's tokens, or stemmed Unicode words), which the saved state
names, so an index is never read with another tokenisation than it was built with (sync.load rebuilds it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import Rows, idf_mass
from citerag.index.files import load_arrays, new_name, save_array, save_arrays
from citerag.lang import DEFAULT
from citerag.store.base import ChunkBatch

FREEZE_ROWS = 50_000  # in-memory postings become an array segment past this many rows (Python lists are heavy)
COMPACT_DEAD_FRACTION = 0.25


class Segment:
    """Postings of some rows: for term t, rows[offsets[t]:offsets[t+1]] and their term frequencies."""

    def __init__(self, terms: list[str], offsets: np.ndarray, rows: np.ndarray, tfs: np.ndarray,
                 name: str | None = None) -> None:
        self.terms = terms
        self.vocab = {t: i for i, t in enumerate(terms)}
        self.offsets, self.rows, self.tfs = offsets, rows, tfs
        self.name = name  # its directory once saved

    def __len__(self) -> int:
        return len(self.rows)

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        i = self.vocab.get(term)
        if i is None:
            return None
        a, b = self.offsets[i], self.offsets[i + 1]
        return self.rows[a:b], self.tfs[a:b]

    @classmethod
    def from_postings(cls, postings: dict[str, tuple[list[int], list[int]]]) -> Segment:
        terms = sorted(postings)
        counts = np.fromiter((len(postings[t][0]) for t in terms), dtype=np.int64, count=len(terms))
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        rows = np.fromiter((r for t in terms for r in postings[t][0]), dtype=np.int64, count=int(offsets[-1]))
        tfs = np.fromiter((f for t in terms for f in postings[t][1]), dtype=np.int32, count=int(offsets[-1]))
        return cls(terms, offsets, rows, tfs)

    @classmethod
    def merge(cls, segments: list[Segment], live: np.ndarray, remap: np.ndarray | None = None) -> Segment:
        """One segment with the live postings of all; `remap` renumbers rows (compaction)."""
        terms = sorted(set().union(*(s.terms for s in segments)))
        index = {t: i for i, t in enumerate(terms)}
        term_ids, rows, tfs = [], [], []
        for s in segments:
            local = np.fromiter((index[t] for t in s.terms), dtype=np.int64, count=len(s.terms))
            tid = np.repeat(local, np.diff(s.offsets))
            keep = live[s.rows]
            term_ids.append(tid[keep])
            rows.append(np.asarray(s.rows)[keep])
            tfs.append(np.asarray(s.tfs)[keep])
        tid, row, tf = np.concatenate(term_ids), np.concatenate(rows), np.concatenate(tfs)
        order = np.lexsort((row, tid))
        tid, row, tf = tid[order], row[order], tf[order]
        if remap is not None:
            row = remap[row]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(tid, minlength=len(terms)))]).astype(np.int64)
        used = np.diff(offsets) > 0  # terms whose every posting died
        if not used.all():
            terms = [t for t, u in zip(terms, used, strict=True) if u]
            offsets = np.concatenate([[0], np.cumsum(np.diff(offsets)[used])]).astype(np.int64)
        return cls(terms, offsets, row, tf)

    def save(self, directory: Path) -> str:
        name = new_name("bm25-segment")
        folder = directory / name
        folder.mkdir()
        (folder / "terms.txt").write_text("\n".join(self.terms), encoding="utf-8")  # ASCII for the reference
        save_array(folder / "offsets.npy", self.offsets)
        save_array(folder / "rows.npy", np.asarray(self.rows))
        save_array(folder / "tfs.npy", np.asarray(self.tfs))
        self.name = name
        return name

    @classmethod
    def load(cls, directory: Path, name: str) -> Segment:
        folder = directory / name
        text = (folder / "terms.txt").read_text(encoding="utf-8")
        return cls(text.split("\n") if text else [], np.load(folder / "offsets.npy"),
                   np.load(folder / "rows.npy", mmap_mode="r"), np.load(folder / "tfs.npy", mmap_mode="r"), name)


class Bm25Index:
    kind = "bm25"

    def __init__(self, k1: float = 1.2, b: float = 0.75, rows: Rows | None = None,
                 lengths: np.ndarray | None = None, segments: list[Segment] | None = None,
                 analyzer: Analyzer = REFERENCE, languages: dict[str, int] | None = None) -> None:
        self.k1, self.b = k1, b
        self.analyzer = analyzer
        # Chunks added per detected language (not decremented on removal): a short query's fallback language.
        self.languages: Counter[str] = Counter(languages or {})
        self.rows = rows or Rows()
        self.lengths = np.zeros(0, dtype=np.float64) if lengths is None else np.asarray(lengths, dtype=np.float64)
        self.segments = segments or []
        self._pending: dict[str, tuple[list[int], list[int]]] = {}
        self._pending_rows = 0

    def __len__(self) -> int:
        return self.rows.live_count

    def add(self, batch: ChunkBatch) -> None:
        if not len(batch):
            return
        rows = self.rows.append(batch.ids, batch.document_ids)
        lengths = np.zeros(len(rows), dtype=np.float64)
        for i, (row, text) in enumerate(zip(rows.tolist(), batch.texts, strict=True)):
            language = self.analyzer.language(text)
            if language is not None:
                self.languages[language] += 1
            words = self.analyzer.terms(text, language)
            lengths[i] = len(words)
            for word, count in Counter(words).items():
                ids, tfs = self._pending.setdefault(word, ([], []))
                ids.append(row)
                tfs.append(count)
        self.lengths = np.concatenate([self.lengths, lengths])
        self._pending_rows += len(rows)
        if self._pending_rows >= FREEZE_ROWS:
            self._freeze()

    def _freeze(self) -> None:
        if self._pending:
            self.segments.append(Segment.from_postings(self._pending))
        self._pending, self._pending_rows = {}, 0

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        self.rows.remove_documents(document_ids)

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        rows, tfs = [], []
        for s in self.segments:
            hit = s.postings(term)
            if hit is not None:
                rows.append(hit[0])
                tfs.append(hit[1])
        pending = self._pending.get(term)
        if pending is not None:
            rows.append(np.asarray(pending[0], dtype=np.int64))
            tfs.append(np.asarray(pending[1], dtype=np.int32))
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        row, tf = np.concatenate(rows), np.concatenate(tfs)
        keep = self.rows.live[row]
        return row[keep], tf[keep]

    @property
    def language(self) -> str:
        """The language most chunks were added in: a query too short to detect is taken to be in it."""
        return self.languages.most_common(1)[0][0] if self.languages else DEFAULT

    def scores(self, query: str) -> np.ndarray:
        """The reference's score of every row (dead rows score 0)."""
        out = np.zeros(len(self.rows), dtype=np.float64)
        n = self.rows.live_count
        if not n:
            return out
        avg = float(self.lengths[self.rows.live].sum() / n)  # integer-valued, so the sum is exact in any order
        k1, b = self.k1, self.b
        weights: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for word in self.analyzer.terms(query, fallback=self.language):  # a repeated word counts again
            if word not in weights:
                row, tf = self._postings(word)
                df = len(row)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                f = tf.astype(np.float64)
                # Same operation order as the reference, so the floating-point result is the same.
                weights[word] = (row, idf * (f * (k1 + 1)) / (f + k1 * (1 - b + (b * self.lengths[row]) / avg)))
            row, weight = weights[word]
            out[row] += weight
        return out

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.rows.best(self.scores(query), k, positive=True)

    def query_mass(self, query: str) -> float:
        n = self.rows.live_count
        if not n:
            return 0.0
        terms = self.analyzer.terms(query, fallback=self.language)
        return idf_mass(n, {t: len(self._postings(t)[0]) for t in set(terms)}, terms)

    def save(self, directory: Path) -> dict[str, Any]:
        self._freeze()
        dead = len(self.rows) - self.rows.live_count
        if dead > COMPACT_DEAD_FRACTION * max(len(self.rows), 1) or (dead and not self.rows.live_count):
            self._compact()
        else:
            # Merge tiers: a segment at least a quarter of the size of the one before it joins it.
            while len(self.segments) > 1 and len(self.segments[-1]) * 4 >= len(self.segments[-2]):
                last = self.segments.pop()
                self.segments[-1] = Segment.merge([self.segments[-1], last], self.rows.live)
        names = [s.name if s.name is not None else s.save(directory) for s in self.segments]
        table = new_name("bm25-rows", ".npz")
        save_arrays(directory / table, ids=self.rows.ids, documents=self.rows.documents, lengths=self.lengths)
        return {"type": self.kind, "k1": self.k1, "b": self.b, "segments": names, "table": table,
                "analyzer": self.analyzer.name, "languages": dict(self.languages)}

    def _compact(self) -> None:
        live = self.rows.live
        remap = np.cumsum(live) - 1
        self.segments = [Segment.merge(self.segments, live, remap)] if self.segments else []
        self.rows = Rows(self.rows.ids[live], self.rows.documents[live])
        self.lengths = self.lengths[live]

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any], analyzer: Analyzer = REFERENCE) -> Bm25Index:
        """The saved index; ValueError when it was built with another analyzer than `analyzer` (a state saved
        before analyzers were named used the reference's tokens)."""
        built = state.get("analyzer", REFERENCE.name)
        if built != analyzer.name:
            raise ValueError(f"the lexical index was built with the {built!r} tokenisation, not {analyzer.name!r}")
        table = load_arrays(directory / state["table"])
        segments = [Segment.load(directory, name) for name in state["segments"]]
        return cls(float(state["k1"]), float(state["b"]), Rows(table["ids"], table["documents"]), table["lengths"],
                   segments, analyzer, state.get("languages"))

    @staticmethod
    def files(state: dict[str, Any]) -> set[str]:
        return {state["table"], *state["segments"]}
