"""Follow-up ground truth: conversations whose last turn only makes sense with the earlier ones.

conversations.jsonl: {"id", "style", "turns", "needle", "source"} per line. `turns` holds the user's questions in
order (two or three); the needle is a verbatim sentence of the corpus that answers the last turn, under the
same rules as questions.jsonl (once in the corpus, in its source, not in a heading). `style` says what makes the
last turn depend on the others (pronoun, ellipsis, comparison, other-option, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citerag.errors import CiteragError
from citerag.eval.truth import Question


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


def _conversation(path: Path, number: int, row: Any, seen: set[str]) -> Conversation:
    where = f"{path}:{number}"
    if not isinstance(row, dict):
        raise CiteragError(f"{where}: expected a JSON object")
    missing = [k for k in ("id", "style", "needle", "source") if not isinstance(row.get(k), str) or not row[k].strip()]
    if missing:
        raise CiteragError(f"{where}: missing or empty field(s) {', '.join(missing)}")
    turns = row.get("turns")
    if not isinstance(turns, list) or not 2 <= len(turns) <= 5 or not all(isinstance(t, str) and t.strip()
                                                                          for t in turns):
        raise CiteragError(f"{where}: \"turns\" must be a list of 2 to 5 non-empty strings")
    if row["id"] in seen:
        raise CiteragError(f"{where}: duplicate id {row['id']!r}")
    seen.add(row["id"])
    return Conversation(row["id"], row["style"], tuple(turns), row["needle"], row["source"])


def load_conversations(path: Path) -> list[Conversation]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CiteragError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CiteragError(f"cannot read {path}: {exc}") from exc
    seen: set[str] = set()
    out: list[Conversation] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CiteragError(f"{path}:{number}: not JSON ({exc.msg})") from None
        out.append(_conversation(path, number, row, seen))
    if not out:
        raise CiteragError(f"{path} holds no conversations")
    return out
