"""Checks a dev set's conversations.jsonl against the needle rules (once in the corpus, in its source, not in a
heading) and prints one line per problem, then PASS or FAIL.

    python scripts/check_conversations.py eval/postgresql
"""

from __future__ import annotations

import sys
from pathlib import Path

from citerag.eval.conversations import load_conversations
from citerag.eval.devset import dev_set
from citerag.eval.needle import check_needles
from citerag.eval.runner import corpus_files, extract_corpus


def main(folder: Path) -> int:
    found = dev_set(folder)
    conversations = load_conversations(folder / "conversations.jsonl")
    problems = check_needles(extract_corpus(corpus_files(found.corpus, found.exclude)),
                             [c.last for c in conversations])
    for p in problems:
        print(f"{p.truth}: {p.problem}")
    turns = sum(len(c.turns) for c in conversations)
    print(f"{len(conversations)} conversations, {turns} turns: {'FAIL' if problems else 'PASS'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
