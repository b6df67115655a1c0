"""What the trace tests share. A plain module (not conftest), so that `from trace_fixtures import ...` finds it
whichever conftest pytest imported first."""

from __future__ import annotations

from pathlib import Path

from citerag.app.home import Citerag
from citerag.settings import Settings

NOTES_V1 = """# Harbor notes

## Lighthouse

The lighthouse keeper on Quillby Island polishes the brass lens every Tuesday at dawn.

## Ferry

The ferry to Quillby Island leaves from pier seven at noon and carries bicycles for free.
"""
# The same file with one sentence changed: only the Lighthouse chunk differs.
NOTES_V2 = NOTES_V1.replace("every Tuesday at dawn", "every Friday after the storm bell rings twice")
ASKED = "When does the lighthouse keeper polish the brass lens?"
OFF_TOPIC = "Which spices go into a traditional Sichuan hot pot broth?"


def open_app(index: Path, **settings: object) -> Citerag:
    return Citerag.open(Settings(index_dir=index, **settings), create=True)  # type: ignore[arg-type]
