"""Conversations in a collection's store, the SQL both backends share (placeholders differ: `?` and `%s`).

A conversation's rows live with its collection (deleted with it) and never touch the store's generation: a
question asked changes no document, so no cache or search index has to notice. Each turn is one short
transaction of its own; the owner is checked inside it, so two keys can never write one conversation.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from citerag.errors import CiteragError
from citerag.types import ConversationInfo, Turn

TITLE_CHARS = 120
MAX_TURNS = 200  # a conversation is a chat, not a log; past this, start a new one
TURN_COLUMNS = "n, question, query, answer, refused, citations, trace_id, created_at"
INFO_COLUMNS = ("c.id, c.owner, c.title, (SELECT COUNT(*) FROM turns t WHERE t.conversation_id = c.id), "
                "c.created_at, c.updated_at")


class NotYours(CiteragError):
    """The conversation belongs to another owner: callers say 'not found', as for one that does not exist."""


def info(row: tuple[Any, ...]) -> ConversationInfo:
    return ConversationInfo(str(row[0]), str(row[1]), str(row[2]), int(row[3]), str(row[4]), str(row[5]))


def turn(row: tuple[Any, ...]) -> Turn:
    citations = row[5] if isinstance(row[5], list) else json.loads(row[5])
    return Turn(str(row[1]), str(row[2]), str(row[3]), bool(row[4]), citations, row[6], int(row[0]), str(row[7]))


def turn_values(conversation_id: str, n: int, t: Turn, now: str) -> tuple[Any, ...]:
    return (conversation_id, n, t.question, t.query, t.answer, t.refused, json.dumps(t.citations), t.trace_id, now)


def next_n(existing: tuple[Any, ...] | None, owner: str, count: int) -> int:
    """The number of the turn to add, after checking who owns the conversation (None: a new one)."""
    if existing is not None and existing[0] != owner:
        raise NotYours("conversation not found")
    if count >= MAX_TURNS:
        raise CiteragError(f"a conversation holds at most {MAX_TURNS} turns: start a new one")
    return count + 1


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _sql(text: str, ph: str) -> str:
    return text.replace("?", ph)


Scope = dict[str, Any]  # the columns that place a row in its collection: none in SQLite (a file per collection)


def _where(scope: Scope, prefix: str = "c.") -> str:
    return "".join(f" AND {prefix}{k} = ?" for k in scope)


def add_turn(db: Any, ph: str, conversation_id: str, owner: str, t: Turn, scope: Scope | None = None,
             lock: str = "") -> Turn:
    """Inside the caller's write transaction (`db` a sqlite3 or psycopg connection, `ph` its placeholder; `lock`
    " FOR UPDATE" where rows can be locked): create the conversation if new, check its owner, append the turn."""
    scope = scope or {}
    at = now()
    columns = ", ".join(["id", "owner", "title", "created_at", "updated_at", *scope])
    marks = ", ".join("?" * (5 + len(scope)))
    db.execute(_sql(f"INSERT INTO conversations ({columns}) VALUES ({marks}) ON CONFLICT (id) DO NOTHING", ph),
               (conversation_id, owner, " ".join(t.question.split())[:TITLE_CHARS], at, at, *scope.values()))
    found = db.execute(_sql("SELECT c.owner FROM conversations c WHERE c.id = ?" + _where(scope) + lock, ph),
                       (conversation_id, *scope.values())).fetchone()
    if found is None:  # the id is another collection's
        raise NotYours("conversation not found")
    count = db.execute(_sql("SELECT COUNT(*) FROM turns WHERE conversation_id = ?", ph), (conversation_id,)).fetchone()
    n = next_n(found, owner, int(count[0]))
    db.execute(_sql("UPDATE conversations SET updated_at = ? WHERE id = ?", ph), (at, conversation_id))
    db.execute(_sql(f"INSERT INTO turns (conversation_id, {TURN_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", ph),
               turn_values(conversation_id, n, t, at))
    return Turn(t.question, t.query, t.answer, t.refused, t.citations, t.trace_id, n, at)


def list_for(db: Any, ph: str, owner: str, limit: int, scope: Scope | None = None) -> list[ConversationInfo]:
    scope = scope or {}
    rows = db.execute(_sql(f"SELECT {INFO_COLUMNS} FROM conversations c WHERE c.owner = ?{_where(scope)} "
                           "ORDER BY c.updated_at DESC, c.id LIMIT ?", ph), (owner, *scope.values(), limit)).fetchall()
    return [info(r) for r in rows]


def read(db: Any, ph: str, conversation_id: str, scope: Scope | None = None
         ) -> tuple[ConversationInfo, list[Turn]] | None:
    scope = scope or {}
    row = db.execute(_sql(f"SELECT {INFO_COLUMNS} FROM conversations c WHERE c.id = ?{_where(scope)}", ph),
                     (conversation_id, *scope.values())).fetchone()
    if row is None:
        return None
    rows = db.execute(_sql(f"SELECT {TURN_COLUMNS} FROM turns WHERE conversation_id = ? ORDER BY n", ph),
                      (conversation_id,)).fetchall()
    return info(row), [turn(r) for r in rows]


def delete(db: Any, ph: str, conversation_id: str, scope: Scope | None = None) -> bool:
    scope = scope or {}
    gone = db.execute(_sql(f"DELETE FROM conversations WHERE id = ?{_where(scope, '')} RETURNING id", ph),
                      (conversation_id, *scope.values())).fetchone() is not None
    if gone:
        db.execute(_sql("DELETE FROM turns WHERE conversation_id = ?", ph), (conversation_id,))
    return gone
