"""Fit a collection's refusal rule without a labelled question.

Positives: synthetic in-domain questions made from the collection's chunks (`synthetic.py`). Negatives: the
shipped bank of general out-of-domain questions (`bank.py`). Each question's best-hit cosine distance under the
collection's own encoder; the cut minimises  cost_ratio * (bank questions answered) / bank
+ (synthetic questions refused) / synthetic  (rates, so the two sets weigh the same whatever their sizes),
ties going to fewer bluffs, and of the run of cuts that achieve it, the middle (rounded to 3 decimals): the widest
margin to the questions either side.

The lexical cut is fitted second, by the same cost over both whole sets, on the questions the distance cut refuses:
their best chunk's share of the question's lexical evidence (Hit.lexical). It is fitted after the distance cut,
not with it, because synthetic questions are made of their chunk's words and hold far more lexical evidence
than real ones: fitted jointly, the distance cut would move to let the lexical cut do its work, and real
questions (which paraphrase) would be refused. Fitted after it, the lexical cut only gives back refusals, and
lands above every bank question's evidence but a few.

Languages: the collection's are detected on a seeded sample of its chunks; each language with a real share
(MIN_SHARE) contributes its bank (English where it has none), so a mixed German and English collection is fitted
on both banks. A collection of one language phrases every synthetic question in it; a mixed one phrases each in
its chunk's language.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np

from citerag.errors import CiteragError
from citerag.lang import DEFAULT, detect
from citerag.refusal.bank import bank_language, load_bank
from citerag.refusal.rule import RULE_VERSION, RefusalRule
from citerag.refusal.synthetic import synthetic_questions
from citerag.types import StoredChunk

COST_RATIO = 3.0  # a bluff (a confident, cited answer to what the corpus does not hold) costs three refusals
SYNTHETIC = 200
MIN_SYNTHETIC = 20  # fewer and the cut is noise: the collection keeps the threshold setting
# A handful of chunks gives many questions that are rewordings of each other: no evidence about real ones.
MIN_CHUNKS = 20
SEED = 13
LANGUAGE_SAMPLE = 300  # chunks whose language is detected: enough to see a share of MIN_SHARE
# A language this share of the sampled chunks makes up is one the collection is written in: its questions are
# expected, so its bank and phrasing are used. Below it: code listings, quotations, detector noise.
MIN_SHARE = 0.2
REFIT_MOVED = 0.10  # the service refits the rule when the indexed document count moved by more than this

# Each question's best-hit cosine distance (dense, exact) and the largest share of its lexical evidence one chunk
# holds (BM25 / idf mass, citerag.search.fusion): what the collection supplies.
BestSignals = Callable[[Sequence[str]], list[tuple[float, float]]]


class TooSmall(CiteragError):
    """A collection too small to make enough synthetic questions from."""


def choose_cut(inside: Sequence[float], outside: Sequence[float], cost_ratio: float = COST_RATIO,
               n_inside: int | None = None, n_outside: int | None = None) -> float:
    """The cut on best distances (answer when best < cut) minimising cost_ratio * bluff rate + refusal rate; the
    rates are over `n_inside` and `n_outside` questions when `inside` and `outside` are only those still open."""
    values = sorted(set(inside) | set(outside))
    spans = [(values[0] - 0.02, values[0]), *zip(values, values[1:], strict=False), (values[-1], values[-1] + 0.02)]
    ins, outs = np.asarray(inside), np.asarray(outside)
    n_in, n_out = n_inside or len(ins), n_outside or len(outs)

    def key(t: float) -> tuple[float, int]:
        bluffs = int((outs < t).sum())
        return (round(cost_ratio * bluffs / n_out + float((ins >= t).sum()) / n_in, 9), bluffs)

    keys = [key((a + b) / 2) for a, b in spans]
    first = keys.index(min(keys))
    last = first
    while last + 1 < len(keys) and keys[last + 1] == keys[first]:
        last += 1
    return round((spans[first][0] + spans[last][1]) / 2, 3)


def _summary(values: Sequence[float]) -> list[float]:
    return [round(float(np.min(values)), 6), round(float(np.median(values)), 6), round(float(np.max(values)), 6)]


def language_shares(chunks: Sequence[StoredChunk], sample: int = LANGUAGE_SAMPLE,
                    seed: int = SEED) -> dict[str, float]:
    """The share of each detected language among a seeded sample of the chunks, largest first."""
    picked = random.Random(seed).sample(list(chunks), min(sample, len(chunks)))
    counts = Counter(detect(c.content) for c in picked)
    return {code: round(n / len(picked), 3) for code, n in counts.most_common()} if picked else {}


def collection_languages(shares: dict[str, float], min_share: float = MIN_SHARE) -> list[str]:
    """The languages a collection is written in: those of at least `min_share`, else its largest; English for
    none."""
    chosen = [code for code, share in shares.items() if share >= min_share]
    return chosen or list(shares)[:1] or [DEFAULT]


def lexical_cut(inside: Sequence[tuple[float, float]], outside: Sequence[tuple[float, float]], cut: float,
                cost_ratio: float = COST_RATIO) -> float | None:
    """The lexical cut (answer when a chunk holds at least this share of the question's lexical evidence) for the
    questions the distance `cut` refuses, by the same cost over the whole sets; None when it refuses no synthetic
    question (nothing to give back)."""
    ins = [-lex for d, lex in inside if d >= cut]
    outs = [-lex for d, lex in outside if d >= cut]
    if not ins:
        return None
    # Negated, so that choose_cut's "answer when value < cut" reads "answer when evidence > cut".
    return -choose_cut(ins, outs or [0.0], cost_ratio, len(inside), len(outside))


def fit_rule(chunks: Sequence[StoredChunk], documents: int, encoder: str, best_signals: BestSignals,
             cost_ratio: float = COST_RATIO, synthetic: int = SYNTHETIC, seed: int = SEED) -> RefusalRule:
    """The calibrated rule of a collection with these chunks. Raises TooSmall under MIN_CHUNKS chunks or
    MIN_SYNTHETIC questions."""
    if len(chunks) < MIN_CHUNKS:
        raise TooSmall(f"{len(chunks)} chunks are too few to calibrate on (at least {MIN_CHUNKS}): the threshold "
                       "setting stays in use")
    shares = language_shares(chunks, seed=seed)
    languages = collection_languages(shares)
    # One language: every question in it (a code listing's chunk still gets a German stem in a German manual).
    phrase_in = languages[0] if len(languages) == 1 else None
    questions = [q.query for q in synthetic_questions(chunks, synthetic, seed, phrase_in)]
    if len(questions) < MIN_SYNTHETIC:
        raise TooSmall(f"only {len(questions)} synthetic questions could be made from {len(chunks)} chunks "
                       f"(at least {MIN_SYNTHETIC} are needed): the threshold setting stays in use")
    banks = list(dict.fromkeys(bank_language(code) for code in languages))
    bank = [b.query for code in banks for b in load_bank(code)]
    signals = best_signals([*questions, *bank])
    inside, outside = signals[:len(questions)], signals[len(questions):]
    cut = choose_cut([d for d, _ in inside], [d for d, _ in outside], cost_ratio)
    lexical = lexical_cut(inside, outside, cut, cost_ratio)
    bar = float("inf") if lexical is None else lexical

    def answered(d: float, lex: float) -> bool:
        return d < cut or lex >= bar

    return RefusalRule(threshold=cut, encoder=encoder, fitted_at=datetime.now(UTC).isoformat(timespec="seconds"),
                       documents=documents, chunks=len(chunks), synthetic=len(inside),
                       synthetic_refused=sum(not answered(*x) for x in inside), bank=len(outside),
                       bank_answered=sum(answered(*x) for x in outside), cost_ratio=cost_ratio, seed=seed,
                       synthetic_best=_summary([d for d, _ in inside]), bank_best=_summary([d for d, _ in outside]),
                       languages=banks, language_shares=shares, lexical_threshold=lexical)


def needs_refit(rule: RefusalRule | None, documents: int, encoder: str, moved: float = REFIT_MOVED) -> bool:
    """The service's policy: fit when there is no rule for this encoder, the rule is of an older version (fitted
    before a signal it lacks existed), or the indexed document count moved by more than `moved` (10 %) since it
    was fitted."""
    if rule is None or rule.encoder != encoder or rule.version < RULE_VERSION:
        return True
    return abs(documents - rule.documents) > moved * max(rule.documents, 1)


def upload_needs_refit(rule: RefusalRule | None, statuses: Sequence[str], encoder: str) -> bool:
    """After an upload, given every document's status: needs_refit, except that while other uploads are still
    pending the indexed count must have doubled (log2 fits, not log1.1): 100 sections uploaded at once took 33.5 s
    to index when refitted every 10 %, 17.3 s so (with the bank's query vectors cached, Shared.embed_queries)."""
    indexed = sum(status == "indexed" for status in statuses)
    return indexed > 0 and needs_refit(rule, indexed, encoder, 1.0 if "pending" in statuses else REFIT_MOVED)
