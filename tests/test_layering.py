"""The layout's rules, checked on the source: one composition root, and `types.py` depending on nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "citerag"
# What only the application core may compose: stores, search state, the indexer, encoders, generators.
INTERNALS = ("citerag.store", "citerag.search", "citerag.ingest", "citerag.embed", "citerag.answer.pipeline",
             "citerag.answer.generators", "citerag.extract", "citerag.config")


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


ENTRY_POINTS = [SRC / "cli.py", SRC / "cli_service.py", SRC / "cli_trace.py", SRC / "cli_worker.py",
                *sorted((SRC / "eval").glob("*.py")), *sorted((SRC / "service").rglob("*.py")),
                *sorted((SRC / "workers").glob("*.py"))]


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: str(p.relative_to(SRC)))
def test_entry_points_use_only_the_application_core(path: Path) -> None:
    found = imports(path)
    bad = sorted(n for n in found if n.startswith(INTERNALS))
    assert bad == [], f"{path.name} composes the pipeline itself: {bad}"


def test_the_cli_eval_and_service_go_through_citerag_app() -> None:
    assert "citerag.app" in imports(SRC / "cli.py")
    assert "citerag.app" in imports(SRC / "service" / "app.py")
    assert any("citerag.app" in imports(p) for p in (SRC / "eval").glob("*.py"))


def test_types_import_nothing_from_citerag() -> None:
    assert [n for n in imports(SRC / "types.py") if n.startswith("citerag")] == []
