"""`citerag worker` with two poisons planted for the tests, and nothing else changed: a Markdown file containing
KILL_MARK kills the worker process (SIGKILL, as the kernel's OOM killer would) each time it is opened; one
containing OUTAGE_MARK raises StoreUnavailable (a store outage) each time. Run as
`python poisoned_worker.py worker --index DIR`."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from citerag.errors import StoreUnavailable
from citerag.extract.markdown import MarkdownExtractor

KILL_MARK = b"CITERAG-TEST-KILL-THE-WORKER"
OUTAGE_MARK = b"CITERAG-TEST-STORE-OUTAGE"
_extract = MarkdownExtractor.extract


def extract(self: MarkdownExtractor, data: bytes, path: Path, title: str | None = None) -> Any:
    if KILL_MARK in data:
        os.kill(os.getpid(), signal.SIGKILL)
    if OUTAGE_MARK in data:
        raise StoreUnavailable("injected outage: the database went away")
    return _extract(self, data, path, title)


if __name__ == "__main__":
    MarkdownExtractor.extract = extract  # type: ignore[method-assign]
    from citerag.cli import main

    sys.argv = ["citerag", *sys.argv[1:]]
    main()
