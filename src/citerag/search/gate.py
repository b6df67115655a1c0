"""The distance gate: what may reach a generator at all."""

from __future__ import annotations

from citerag.types import Hit


def gate(hits: list[Hit], threshold: float, max_sources: int = 4, lexical_threshold: float | None = None) -> list[Hit]:
    """At most `max_sources` hits, in rank order, whose cosine distance is under `threshold`, that hold the
    query's words verbatim (`Hit.exact`: the user pasted this passage's words, so it is no bluff to cite it), or,
    with a `lexical_threshold`, that hold at least that share of the question's lexical evidence (`Hit.lexical`:
    its rare words together in one chunk; a question that names them is rarely out of domain).

    Empty means NO ANSWER: the caller must not call a model. The threshold is the collection's calibrated cut
    (citerag.refusal) or the `threshold` setting; Collection.refusal_status decides which.
    """
    lexical = float("inf") if lexical_threshold is None else lexical_threshold
    return [h for h in hits if h.cosine_distance < threshold or h.exact or h.lexical >= lexical][:max_sources]
