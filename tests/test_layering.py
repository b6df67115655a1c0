"""The layout's rules, checked on the source: layers that import only downwards, no import circles, one composition
root. Every import counts: at the top of a module, deferred into a function, or under TYPE_CHECKING."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "citerag"

# The allow-list: each unit (a top-level module or package of citerag) may import units of lower layers only,
# and its own modules. A new unit must be placed here; an import against it fails.
LAYERS: list[set[str]] = [
    {"citerag", "types", "errors", "text", "lang", "abbreviations", "globs"},
    {"settings"},
    {"extract", "chunk", "embed", "cache", "local_postgres", "config_file"},
    {"store"},
    {"index", "trace", "audit"},
    {"search", "originals", "keystore", "catalog", "jobs", "sources"},
    {"refusal", "answer"},
    {"ingest"},
    {"backends"},  # the one place that names both backends and picks one (citerag.backends.open_backend)
    {"app"},  # the composition root
    {"eval", "service", "workers"},
    {"cli"},
]
LAYER = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
# What only the application core composes: entry points (CLI, eval, service, workers) go through citerag.app.
INTERNALS = ("store", "index", "search", "ingest", "embed", "extract", "backends", "answer.generators", "sources",
             "answer.pipeline", "catalog", "keystore", "originals", "audit")
ENTRY_UNITS = ("cli", "eval", "service", "workers")
# Data and pure rules inside those packages that an entry point may name: what an ingestion takes and gives, the
# gate the evaluation's threshold sweep applies, a generator's Protocol and its error, a key's principal, an audit
# event and its query's checks.
SHARED_DATA = ("citerag.ingest.files", "citerag.search.gate", "citerag.answer.generators.base", "citerag.keystore.base",
               "citerag.audit.base")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _resolve(name: str) -> str | None:
    """The module of citerag that an imported name lives in (a name imported from a package is its __init__)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


@cache
def imports(module: str) -> frozenset[str]:
    """Every citerag module `module` imports, wherever the import statement stands."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(_resolve(a.name) for a in node.names if a.name.split(".")[0] == "citerag")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            if base.split(".")[0] != "citerag":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in MODULES else _resolve(base))
    return frozenset(m for m in found if m is not None and m != module)


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "citerag"


def test_every_unit_has_a_layer() -> None:
    assert sorted({unit(m) for m in MODULES} - set(LAYER)) == []


def test_imports_go_only_downwards() -> None:
    against = sorted(f"{m} -> {i}" for m in MODULES for i in imports(m)
                     if unit(i) != unit(m) and LAYER[unit(i)] >= LAYER[unit(m)])
    assert against == []


def test_no_import_circles() -> None:
    # Tarjan's strongly connected components over every module's imports.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in imports(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                circles.append(sorted([v, *component]))

    for module in MODULES:
        if module not in index:
            visit(module)
    assert circles == []


def test_the_scan_sees_deferred_and_type_checking_imports() -> None:
    # citerag.app.home defers nothing, but the query path's collaborators must be found wherever imported.
    assert "citerag.app.collection" in imports("citerag.app.home")
    assert {"citerag.embed", "citerag.search.rerank"} <= imports("citerag.app.shared")  # deferred: loaded lazily


@pytest.mark.parametrize("module", [m for m in MODULES if unit(m) in ENTRY_UNITS])
def test_entry_points_use_only_the_application_core(module: str) -> None:
    bad = sorted(i for i in imports(module) if i not in SHARED_DATA and
                 any(i == f"citerag.{n}" or i.startswith(f"citerag.{n}.") for n in INTERNALS))
    assert bad == [], f"{module} composes the pipeline itself: {bad}"


def test_the_cli_eval_service_and_workers_go_through_citerag_app() -> None:
    for entry in ENTRY_UNITS:
        assert any(unit(m) == entry and any(i.startswith("citerag.app.") for i in imports(m)) for m in MODULES)


def test_types_import_nothing_from_citerag() -> None:
    assert imports("citerag.types") == frozenset()


def test_no_module_is_over_400_lines_and_no_app_module_over_300() -> None:
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    assert sorted(m for m, n in sizes.items() if n > 400) == []
    assert sorted(m for m, n in sizes.items() if unit(m) == "app" and n > 300) == []
