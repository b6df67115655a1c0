"""Follow-up ground truth: conversations whose last turn only makes sense with the earlier ones.

conversations.jsonl: {"id", "style", "turns", "needle", "source"} per line. `turns` holds the user's questions in
order (two or three); the needle is a verbatim sentence of the corpus that answers the last turn, under the
same rules as questions.jsonl (once in the corpus, in its source, not in a heading). `style` says what makes the
last turn depend on the others (pronoun, ellipsis, comparison, other-option, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from citerag.errors import CiteragError
from citerag.eval.truth import Question, read_jsonl


@dataclass(frozen=True)
class Conversation:
    id: str
    style: str
    turns: tuple[str, ...]
    needle: str
    source: str

    @property
    def last(self) -> Question:
        """The last turn as a question, for the needle rule and the per-query figures."""
        return Question(self.id, self.id, self.style, self.turns[-1], self.needle, self.source)


def load_conversations(path: Path) -> list[Conversation]:
    out: list[Conversation] = []
    for row in read_jsonl(path, ("id", "style", "needle", "source"), optional=("turns",)):
        turns = row.get("turns")
        if not isinstance(turns, list) or not 2 <= len(turns) <= 5 or not all(isinstance(t, str) and t.strip()
                                                                              for t in turns):
            raise CiteragError(f"{path}: conversation {row['id']!r}: \"turns\" must be a list of 2 to 5 non-empty "
                               "strings")
        out.append(Conversation(row["id"], row["style"], tuple(turns), row["needle"], row["source"]))
    return out
