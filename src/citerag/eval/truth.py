"""Ground truth as JSONL: answerable questions with a verbatim needle, and out-of-domain queries.

questions.jsonl: {"id", "truth", "style", "query", "needle", "source"} per line, and optionally "answer": the
gold answer span (SQuAD-style sets such as XQuAD carry one; `eval --generate` checks the answer shown holds it).
Two queries (a doc-style and a ticket-style one) may share a truth. ood.jsonl: {"id", "kind", "query"} per line.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from citerag.errors import CiteragError

QUESTION_KEYS = ("id", "truth", "style", "query", "needle", "source")
OOD_KEYS = ("id", "kind", "query")


@dataclass(frozen=True)
class Question:
    id: str
    truth: str
    style: str
    query: str
    needle: str
    source: str
    answer: str | None = None  # gold answer span, when the set has one


@dataclass(frozen=True)
class OodQuery:
    id: str
    kind: str
    query: str
    trap: bool = False  # a near-domain trap: asked in the corpus' own words, yet not answered by it


def read_jsonl(path: Path, keys: tuple[str, ...], optional: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The rows of a ground-truth file, each with its `keys` (non-empty strings, unique "id") and any `optional`
    keys it has (not checked here); a bad line is a one-line error naming the file and line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise CiteragError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CiteragError(f"cannot read {path}: {exc}") from exc
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CiteragError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise CiteragError(f"{path}:{number}: expected a JSON object")
        missing = [k for k in keys if not isinstance(row.get(k), str) or not row[k].strip()]
        if missing:
            raise CiteragError(f"{path}:{number}: missing or empty field(s) {', '.join(missing)}")
        if row["id"] in seen:
            raise CiteragError(f"{path}:{number}: duplicate id {row['id']!r}")
        seen.add(row["id"])
        rows.append({k: row[k] for k in (*keys, *optional) if k in row})
    if not rows:
        raise CiteragError(f"{path} holds no queries")
    return rows


def load_questions(path: Path) -> list[Question]:
    rows = read_jsonl(path, QUESTION_KEYS, optional=("answer",))
    for row in rows:
        if row.get("answer") is None:  # absent or null: this question has no gold answer
            row.pop("answer", None)
        # A blank gold answer would be "contained" in every answer, a non-string one crash the check: refuse both.
        elif not isinstance(row["answer"], str) or not row["answer"].strip():
            raise CiteragError(f"{path}: question {row['id']!r}: \"answer\" must be a non-empty string")
    return [Question(**row) for row in rows]


def load_ood(path: Path) -> list[OodQuery]:
    rows = read_jsonl(path, OOD_KEYS, optional=("trap",))
    return [OodQuery(row["id"], row["kind"], row["query"], row.get("trap") is True) for row in rows]


def fingerprint(questions: list[Question], ood: list[OodQuery]) -> str:
    """sha256 of the ground truth as used, so a report says which set it measured."""
    data = json.dumps([[q.id, q.query, q.needle] for q in questions] + [[o.id, o.query] for o in ood])
    return hashlib.sha256(data.encode("utf-8")).hexdigest()
