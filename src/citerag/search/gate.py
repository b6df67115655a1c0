"""The distance gate: what may reach a generator at all."""

from __future__ import annotations

from citerag.types import Hit


def gate(hits: list[Hit], threshold: float, max_sources: int = 4) -> list[Hit]:
    """At most `max_sources` hits, in rank order, whose cosine distance is under `threshold` or that hold the
    query's words verbatim (`Hit.exact`: the user pasted this passage's words, so it is no bluff to cite it).

    Empty means NO ANSWER: the caller must not call a model. The threshold is the collection's calibrated cut
    (citerag.refusal) or the `threshold` setting; Collection.refusal_status decides which.
    """
    return [h for h in hits if h.cosine_distance < threshold or h.exact][:max_sources]
