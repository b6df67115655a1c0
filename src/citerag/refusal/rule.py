"""A collection's calibrated refusal rule: a plain record, saved as JSON with the collection's store.

The rule is two cuts chosen per collection and encoder by `citerag.refusal.calibrate`: a question is answered
from at most `max_sources` hits that lie under the cosine-distance cut or hold at least the lexical cut's share
of the question's lexical evidence (its rare words together in one chunk, Hit.lexical), and refused (no model
called) otherwise. Other signals (margin between the first hits, the question's words the collection never uses,
a logistic regression over them, a distance of the multilingual model alone for a question in another language)
were measured and did not beat these; see docs/refusal.md.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from citerag.search.gate import gate
from citerag.types import Hit

# 2: the languages the rule was fitted in (`languages`, `language_shares`); a version-1 rule reads as English.
# 3: the lexical cut (`lexical_threshold`); an older rule has none and gates on distance alone.
RULE_VERSION = 3


@dataclass
class RefusalRule:
    """What `calibrate` chose and the figures it was chosen on (synthetic in-domain questions vs the bank)."""

    threshold: float  # answer only from hits whose cosine distance is under this
    encoder: str  # the embedding model the distances are of: a rule never serves another
    fitted_at: str  # ISO 8601, UTC
    documents: int  # indexed documents when fitted (a service recalibrates when this moves by > 10 %)
    chunks: int
    synthetic: int  # synthetic in-domain questions
    synthetic_refused: int  # of them, refused by the rule
    bank: int  # out-of-domain bank questions
    bank_answered: int  # of them, answered by the rule (bluffs)
    cost_ratio: float  # a bluff costs this many refusals
    seed: int
    kind: str = "cut"
    version: int = RULE_VERSION
    # Best-hit distances the cut was chosen from, summarised: (min, median, max) of each set.
    synthetic_best: list[float] = field(default_factory=list)
    bank_best: list[float] = field(default_factory=list)
    # The languages whose banks and question stems it was fitted with (a rule stored before languages were
    # recorded was fitted in English), and the share of each language among a sample of the collection's chunks.
    languages: list[str] = field(default_factory=lambda: ["en"])
    language_shares: dict[str, float] = field(default_factory=dict)
    # A hit holding at least this share of the question's lexical evidence is kept whatever its distance (None:
    # no lexical cut, a rule fitted before version 3); fitted after the distance cut, on the questions it refuses.
    lexical_threshold: float | None = None

    def gate(self, hits: list[Hit], max_sources: int) -> list[Hit]:
        """The hits an answer may use, rank order; empty means NO ANSWER."""
        return gate(hits, self.threshold, max_sources, self.lexical_threshold)

    def describe(self) -> str:
        """One line: the cuts and their figures on the sets they were fitted on."""
        lexical = "" if self.lexical_threshold is None else f" or lexical evidence >= {self.lexical_threshold:.3f}"
        return (f"cosine distance < {self.threshold:.3f}{lexical} (calibrated {self.fitted_at} on {self.documents} "
                "documents, "
                f"{self.encoder}, {'+'.join(self.languages)}): refuses {self.synthetic_refused}/{self.synthetic} "
                "synthetic in-domain questions, "
                f"answers {self.bank_answered}/{self.bank} out-of-domain bank questions")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> RefusalRule:
        data = json.loads(text) if isinstance(text, str) else dict(text)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
