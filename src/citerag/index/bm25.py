"""BM25 postings that persist and update per document, scoring exactly as the reference formula.

Postings live in immutable segments (term -> rows, term frequencies, as CSR arrays, memory-mapped once
saved); new documents go to an in-memory segment that `save` writes as a new one; segments of similar size
are merged so that a million chunks stay in a handful of segments. Removal tombstones rows. Nothing derived
from the collection as a whole (N, document frequencies, the mean length) is stored: every query computes
them over the live rows, so a score after any sequence of updates equals a fresh build's to the last bit.
`search` does not score every posting: each segment keeps per term what bounds its weights whatever N, df and the
mean length become (max tf, min length / tf, and the largest tf / (tf + norm) at the mean length of its build),
and citerag.index.bm25_prune finds the exact top k by MaxScore; `scores` still scores every row.

Hand-written, as `citerag.search.bm25` is, because conformance to the reference's tokens and weights is the
contract; here it is the incremental, persisted form of the same formula. The terms come from the index's
analyzer (citerag.index.analyzer: the reference's tokens, or stemmed Unicode words), which the saved state
names, so an index is never read with another tokenisation than it was built with (sync.load rebuilds it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from citerag.index.analyzer import REFERENCE, Analyzer
from citerag.index.base import Allowed, Rows, idf_mass
from citerag.index.bm25_prune import Bounds, Part, Stats, Term, top_k
from citerag.index.files import load_arrays, new_name, save_array, save_arrays
from citerag.lang import DEFAULT
from citerag.store.base import ChunkBatch

FREEZE_ROWS = 50_000  # in-memory postings become an array segment past this many rows (Python lists are heavy)
COMPACT_DEAD_FRACTION = 0.25


class Segment:
    """Postings of some rows: for term t, rows[offsets[t]:offsets[t+1]] and their term frequencies."""

    def __init__(self, terms: list[str], offsets: np.ndarray, rows: np.ndarray, tfs: np.ndarray,
                 name: str | None = None, bounds: Bounds | None = None) -> None:
        self.terms = terms
        self.vocab = {t: i for i, t in enumerate(terms)}
        # Plain views of the memory maps: np.memmap's indexing wrappers cost more than a small search.
        self.offsets, self.rows, self.tfs = np.asarray(offsets), np.asarray(rows), np.asarray(tfs)
        self.name = name  # its directory once saved
        self.bounds = bounds  # None for a segment saved before bounds were kept: computed per term on first use
        self._legacy: dict[int, Bounds] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def with_bounds(self, lengths: np.ndarray, k1: float, b: float, a0: float) -> Segment:
        self.bounds = Bounds.compute(self.offsets, self.rows, self.tfs, lengths, k1, b, a0)
        return self

    def part(self, term: str, stats: Stats, lengths: np.ndarray) -> Part | None:
        """The term's postings here, with the dead rows among them and the bound of their tf / (tf + norm)."""
        i = self.vocab.get(term)
        if i is None:
            return None
        a, z = int(self.offsets[i]), int(self.offsets[i + 1])
        rows, tfs = self.rows[a:z], self.tfs[a:z]
        bounds = self.bounds
        if bounds is None:
            bounds = self._legacy.get(i)
            if bounds is None:
                bounds = Bounds.compute(np.array([0, z - a]), rows, tfs, lengths, stats.k1, stats.b, stats.avg)
                self._legacy[i] = bounds
            ratio = bounds.ratio(0, stats.k1, stats.b, stats.avg)
        else:
            ratio = bounds.ratio(i, stats.k1, stats.b, stats.avg)
        return Part(rows, tfs, stats.dead_between(int(rows[0]), int(rows[-1])), ratio)

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
        if self.bounds is not None:
            save_arrays(folder / "bounds.npz", **self.bounds.arrays())
        self.name = name
        return name

    @classmethod
    def load(cls, directory: Path, name: str) -> Segment:
        folder = directory / name
        text = (folder / "terms.txt").read_text(encoding="utf-8")
        bounds = Bounds.from_arrays(load_arrays(folder / "bounds.npz")) if (folder / "bounds.npz").exists() else None
        return cls(text.split("\n") if text else [], np.load(folder / "offsets.npy"),
                   np.load(folder / "rows.npy", mmap_mode="r"), np.load(folder / "tfs.npy", mmap_mode="r"), name,
                   bounds)


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
        self._pending_arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # of _pending's lists, per word asked
        self._stats: Stats | None = None

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
        self._pending_arrays, self._stats = {}, None
        if self._pending_rows >= FREEZE_ROWS:
            self._freeze()

    def _avg(self) -> float:
        n = self.rows.live_count
        return float(self.lengths[self.rows.live].sum() / n) if n else 1.0

    def _freeze(self) -> None:
        if self._pending:
            segment = Segment.from_postings(self._pending)
            self.segments.append(segment.with_bounds(self.lengths, self.k1, self.b, self._avg()))
        self._pending, self._pending_rows, self._pending_arrays = {}, 0, {}

    def remove_documents(self, document_ids: Iterable[int]) -> None:
        self.rows.remove_documents(document_ids)
        self._stats = None

    def _live_stats(self, allowed: Allowed | None = None) -> Stats | None:
        """N, avg, each row's length norm and the dead rows, kept until the rows change (None: no live row). With
        `allowed.visible`, those of the documents a caller may read: the others are as dead rows, for this query."""
        if allowed is not None and (readable := allowed.readable()) is not None:
            return self._stats_of(self.rows.allowed(readable))
        live = self.rows.live
        n = int(np.count_nonzero(live))
        stats = self._stats
        if stats is not None and stats.key == (len(live), n) and stats.live is live and stats.lengths is self.lengths:
            return stats
        self._stats = self._stats_of(live)
        return self._stats

    def _stats_of(self, live: np.ndarray) -> Stats | None:
        n = int(np.count_nonzero(live)) if len(live) else 0
        if not n:
            return None
        k1, b = self.k1, self.b
        avg = float(self.lengths[live].sum() / n)  # integer-valued, so the sum is exact in any order
        norm = k1 * (1 - b + (b * self.lengths) / avg)  # element by element as `scores` always computed it
        return Stats((len(live), n), n, avg, norm, live, self.lengths, np.flatnonzero(~live), k1, b)

    def _terms(self, tokens: list[str], stats: Stats) -> dict[str, Term]:
        """The query's words that some segment or the pending rows hold."""
        out: dict[str, Term] = {}
        for word, count in Counter(tokens).items():
            parts = [p for s in self.segments if (p := s.part(word, stats, self.lengths)) is not None]
            pending = self._pending.get(word)
            if pending is not None:
                arrays = self._pending_arrays.get(word)
                if arrays is None:
                    arrays = (np.asarray(pending[0], dtype=np.int64), np.asarray(pending[1], dtype=np.int32))
                    self._pending_arrays[word] = arrays
                rows, tfs = arrays
                f = tfs.astype(np.float64)
                parts.append(Part(rows, tfs, stats.dead_between(int(rows[0]), int(rows[-1])),
                                  min(1.0, float((f / (f + stats.norm[rows])).max()))))
            if parts:
                out[word] = Term(parts, count, stats)
        return out

    @property
    def language(self) -> str:
        """The language most chunks were added in: a query too short to detect is taken to be in it."""
        return self.languages.most_common(1)[0][0] if self.languages else DEFAULT

    def scores(self, query: str) -> np.ndarray:
        """The reference's score of every row (dead rows score 0)."""
        stats = self._live_stats()
        if stats is None:
            return np.zeros(len(self.rows), dtype=np.float64)
        tokens = self.analyzer.terms(query, fallback=self.language)
        return self._full(tokens, self._terms(tokens, stats))

    def _full(self, tokens: list[str], terms: dict[str, Term]) -> np.ndarray:
        out = np.zeros(len(self.rows), dtype=np.float64)
        weights: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        for word in tokens:  # a repeated word counts again
            if word in terms:
                if word not in weights:
                    weights[word] = terms[word].live()
                for rows, weight in weights[word]:
                    out[rows] += weight
        return out

    def search(self, query: str, k: int, allowed: Allowed | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Rows.best over `scores`, computed by MaxScore (citerag.index.bm25_prune) without scoring every posting;
        filtered, every posting is scored and the allowed rows ranked (MaxScore's bounds are the whole index's)."""
        stats = self._live_stats(allowed)
        if k <= 0 or stats is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        tokens = self.analyzer.terms(query, fallback=self.language)
        terms = self._terms(tokens, stats)
        if allowed is not None:
            return self.rows.best(self._full(tokens, terms), k, positive=True, usable=self.rows.allowed(allowed))
        found = top_k(tokens, terms, k, len(self.rows)) if self.k1 >= 0 and 0 <= self.b <= 1 else None
        if found is None:
            return self.rows.best(self._full(tokens, terms), k, positive=True)
        rows, score = found
        positive = score > 0
        rows, score = rows[positive], score[positive]
        ids = self.rows.ids[rows]
        order = np.lexsort((ids, -score))[:k]
        return ids[order], score[order]

    def query_mass(self, query: str, allowed: Allowed | None = None) -> float:
        stats = self._live_stats(allowed)
        if stats is None:
            return 0.0
        tokens = self.analyzer.terms(query, fallback=self.language)
        return idf_mass(stats.n, {w: t.df for w, t in self._terms(tokens, stats).items()}, tokens)

    def save(self, directory: Path) -> dict[str, Any]:
        self._freeze()
        dead = len(self.rows) - self.rows.live_count
        if dead > COMPACT_DEAD_FRACTION * max(len(self.rows), 1) or (dead and not self.rows.live_count):
            self._compact()
        else:
            # Merge tiers: a segment at least a quarter of the size of the one before it joins it.
            while len(self.segments) > 1 and len(self.segments[-1]) * 4 >= len(self.segments[-2]):
                last = self.segments.pop()
                merged = Segment.merge([self.segments[-1], last], self.rows.live)
                self.segments[-1] = merged.with_bounds(self.lengths, self.k1, self.b, self._avg())
        names = [s.name if s.name is not None else s.save(directory) for s in self.segments]
        table = new_name("bm25-rows", ".npz")
        save_arrays(directory / table, ids=self.rows.ids, documents=self.rows.documents, lengths=self.lengths)
        return {"type": self.kind, "k1": self.k1, "b": self.b, "segments": names, "table": table,
                "analyzer": self.analyzer.name, "languages": dict(self.languages)}

    def _compact(self) -> None:
        live = self.rows.live
        remap = np.cumsum(live) - 1
        a0 = self._avg()
        lengths = self.lengths[live]
        self.segments = [Segment.merge(self.segments, live, remap).with_bounds(lengths, self.k1, self.b, a0)] \
            if self.segments else []
        self.rows = Rows(self.rows.ids[live], self.rows.documents[live])
        self.lengths = lengths
        self._stats = None

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
