"""Sentence max-sim rescoring and the encoder ensemble, on real Debian Reference text and the packaged encoders."""

from __future__ import annotations

import json

import numpy as np
import pytest

from citerag.app.files import extract_file
from citerag.chunk import chunk_extracted
from citerag.embed import load_encoder
from citerag.embed.base import Encoder, encode_queries
from citerag.search.ensemble import embed_chunks, ensemble_rank
from citerag.search.fuse import rrf
from citerag.search.rescore import MaxSimSettings, SentenceVectors, header_of, maxsim_rescore, sentences
from citerag.text import collapse
from citerag.types import Document, Hit, StoredChunk
from corpus_paths import DEV_CORPUS, DEV_SET

QUESTIONS = [json.loads(line) for line in (DEV_SET / "questions.jsonl").read_text().splitlines()]
POPCON = next(q for q in QUESTIONS if q["id"] == "dr-01-doc")


class Counting:
    """A real encoder that counts the texts it is asked to embed."""

    def __init__(self, inner: Encoder) -> None:
        self.inner, self.name, self.dim, self.max_tokens = inner, inner.name, inner.dim, inner.max_tokens
        self.texts = 0

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        self.texts += len(texts)
        return self.inner.encode(texts)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)


@pytest.fixture(scope="module")
def minilm() -> Encoder:
    return load_encoder("all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def chunks() -> list[StoredChunk]:
    """Strategy-E chunks of two real chapters, as the indexer would store them."""
    out: list[StoredChunk] = []
    for name in ("pr01.en.html", "apa.en.html"):
        for c in chunk_extracted(extract_file(DEV_CORPUS / name), "E"):
            out.append(StoredChunk(len(out) + 1, 1, len(out), c.text, c.content, c.section, c.start, c.end))
    return out


def doc() -> Document:
    return Document(1, "x.html", "x.html", "x", "0" * 64, "indexed", None, [], 0, {}, "")


def hits_for(encoder: Encoder, query: str, chunks: list[StoredChunk]) -> list[Hit]:
    q = encoder.encode([query])[0]
    cos = encoder.encode([c.text for c in chunks]) @ q
    return [Hit(chunks[i], doc(), r + 1, float(cos[i]), 1.0 - float(cos[i])) for r, i in enumerate(np.argsort(-cos))]


def test_sentences_split_real_prose_and_keep_every_word() -> None:
    needles = [q["needle"] for q in QUESTIONS[:6]]
    content = " ".join(needles[:3]) + "\n" + "\n".join(needles[3:]) + "\nSee below.\nAlso"
    parts = sentences(content)
    assert collapse(" ".join(parts)) == collapse(content)  # nothing lost, nothing added
    assert all(len(p.split()) >= 4 for p in parts)
    assert parts[-1].endswith("See below. Also")  # short trailing fragments join the sentence before
    assert sentences("Note: x.\nThe popcon number is calculated from the submissions.") == [
        "Note: x. The popcon number is calculated from the submissions."]  # a leading fragment joins the next
    assert sentences("   \n ") == []


def test_header_goes_in_front_of_each_sentence(chunks: list[StoredChunk]) -> None:
    chunk = next(c for c in chunks if c.text != c.content)
    header = header_of(chunk)
    assert header.startswith("[") and chunk.text.startswith(header)
    bare = StoredChunk(1, 1, 0, "plain text here.", "plain text here.", "", 0, 0)
    assert header_of(bare) == ""


def test_a_sentence_past_the_encoder_window_lifts_its_chunk(minilm: Encoder, chunks: list[StoredChunk]) -> None:
    # The popcon answer buried after ~400 words of another chapter: the chunk's single vector stops at 256
    # word pieces and never sees it; its best sentence does.
    filler = " ".join(" ".join(c.content for c in chunks if "popcon" not in c.text.lower()).split()[:400])
    buried = StoredChunk(9001, 1, 0, filler + " " + POPCON["needle"], filler + " " + POPCON["needle"], "", 0, 0)
    pool = [c for c in chunks if "popcon" not in c.text.lower()][:19] + [buried]
    hits = hits_for(minilm, POPCON["query"], pool)
    assert hits[0].chunk.id != 9001  # dense alone does not find it
    q = minilm.encode([POPCON["query"]])[0]
    out = maxsim_rescore(q, hits, SentenceVectors(minilm, MaxSimSettings(weight=1.0)))
    assert out[0].chunk.id == 9001
    assert [h.rank for h in out] == list(range(1, len(hits) + 1))
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)
    before = {h.chunk.id: h.cosine_distance for h in hits}
    assert all(h.cosine_distance == before[h.chunk.id] for h in out)  # the gate sees the same distances
    # Weight 0 is the chunk cosine alone: the dense order back.
    same = maxsim_rescore(q, hits, SentenceVectors(minilm, MaxSimSettings(weight=0.0)))
    assert [h.chunk.id for h in same] == [h.chunk.id for h in hits]


def test_sentence_vectors_are_embedded_once(minilm: Encoder, chunks: list[StoredChunk]) -> None:
    counting = Counting(minilm)
    vectors = SentenceVectors(counting, MaxSimSettings(), max_chunks=3)
    first = vectors.get(chunks[:3])
    n = counting.texts
    assert n == sum(len(m) for m in first) and all(m.shape[1] == minilm.dim for m in first)
    again = vectors.get(chunks[:3])
    assert counting.texts == n and all(a is b for a, b in zip(first, again, strict=True))
    vectors.get(chunks[3:4])  # over max_chunks: the least recently used chunk goes
    vectors.get(chunks[:1])
    assert counting.texts > n + len(vectors.get(chunks[3:4])[0])


def test_the_ensemble_fuses_each_encoders_ranking(minilm: Encoder, chunks: list[StoredChunk]) -> None:
    e5 = load_encoder("multilingual-e5-small")
    ids, texts = [c.id for c in chunks], [c.text for c in chunks]
    matrices = [embed_chunks(minilm, ids, texts), embed_chunks(e5, ids, texts)]
    answer = next(c.id for c in chunks if collapse(POPCON["needle"]) in collapse(c.content))
    alone = [m.rank(encode_queries(m.encoder, [POPCON["query"]])[0], 10) for m in matrices]
    assert all(r[0] == answer for r in alone)  # both models find it first on their own
    fused = ensemble_rank(POPCON["query"], matrices, depth=10)
    assert fused[0] == answer and fused == [i for i, _ in rrf(alone)]
    # A ranking made elsewhere (the index's own) counts as one more voter.
    assert ensemble_rank(POPCON["query"], matrices[1:], depth=10, extra=[alone[0]]) == fused
