"""A process that keeps traces, for tests/trace/test_trace_writer.py (run as a script, not collected).

    python trace_child.py kill|exit INDEX COUNT

Opens INDEX with the hash encoder, indexes one document, then asks and searches, printing one JSON line per
operation once it has returned (its trace id, what it answered). Its trace writer is slowed (every record it
serializes, inside the write transaction, takes SLOW_S), so traces queue up behind the operations and a kill
lands, most likely, inside a write transaction. `kill`: goes on until it is killed. `exit`: stops after COUNT
operations and returns from main without closing anything: the interpreter's exit writes the queue.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: fakes

from trace_fixtures import NOTES_V1  # noqa: E402

from citerag.app.home import Citerag  # noqa: E402
from citerag.app.models import AskOptions  # noqa: E402
from citerag.ingest.files import Source  # noqa: E402
from citerag.settings import Settings  # noqa: E402
from citerag.trace import store_sqlite  # noqa: E402
from fakes import HashEncoder  # noqa: E402

SLOW_S = 0.005
QUESTION = "When does the ferry to Quillby Island leave? ({})"


def slow_dumps(value: Any, **options: Any) -> str:
    time.sleep(SLOW_S)
    return json.dumps(value, **options)


def main() -> None:
    mode, index, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    store_sqlite.json = SimpleNamespace(dumps=slow_dumps, loads=json.loads)  # type: ignore[assignment]
    app = Citerag()
    app.register_encoder(HashEncoder())
    app.open_collection(Settings(index_dir=index, embedding_model="hash-64"), create=True)
    outcome = app.index_document(Source("notes.md", NOTES_V1.encode()))
    print(json.dumps({"op": "index", "status": outcome.status}), flush=True)
    n = 0
    while mode == "kill" or n < count:
        question = QUESTION.format(n)
        if n % 2:
            result = app.search(question)
            line = {"op": "search", "question": question, "trace_id": result.trace_id}
        else:
            answer = app.ask(question, AskOptions(threshold=2.0))
            line = {"op": "ask", "question": question, "trace_id": answer.trace_id, "answer": answer.answer}
        print(json.dumps(line), flush=True)
        n += 1


if __name__ == "__main__":
    main()
