"""The floors of the house (AGENTS.md, "Layers"): a module imports only from its
own floor or the floors below, at module level, inside functions and under TYPE_CHECKING alike,
and no modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

FLOORS = {  # a module's floor is that of its entry or of the package it is in; higher is above
    "ragloop.core": 1,
    "ragloop.config": 2,
    "ragloop.components": 3,
    "ragloop.kb": 3,
    "ragloop.retrieval": 3,
    "ragloop.providers": 3,
    "ragloop.observability": 3,
    "ragloop.testing": 3,
    "ragloop.engines": 4,
    "ragloop.offline": 5,
    "ragloop.offline_retrieval": 5,
    "ragloop.evaluation": 5,
    "ragloop.demo": 5,
    "ragloop.cli": 6,
    "ragloop.server": 6,
    "ragloop.__main__": 6,
}

FRONT_DOOR = 5  # the root package, ``from ragloop import ...``


def floor(module: str) -> int:
    for prefix, number in FLOORS.items():
        if module == prefix or module.startswith(prefix + "."):
            return number
    return FRONT_DOOR


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    root = SRC / "ragloop"
    return (root / name / "__init__.py").is_file() or (root / f"{name}.py").is_file()


def imports(path: Path) -> set[str]:
    """Every ragloop module ``path`` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "ragloop"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ragloop":  # a subpackage by its name, else the front door
                found |= {
                    f"ragloop.{a.name}" if is_module(a.name) else "ragloop" for a in node.names
                }
            elif node.module.startswith("ragloop."):
                found.add(node.module)
    return found


def climbing() -> set[tuple[str, str]]:
    out = set()
    for path in sorted((SRC / "ragloop").rglob("*.py")):
        importer = module_name(path)
        for imported in imports(path):
            if floor(imported) > floor(importer):
                out.add((importer, imported))
    return out


def circles() -> set[frozenset[str]]:
    """The groups of modules that reach each other through imports (a package's own
    ``__init__`` re-exporting its modules is not counted: importing the package is not
    importing them)."""
    paths = {module_name(p): p for p in (SRC / "ragloop").rglob("*.py")}
    graph = {
        m: {i for i in imports(p) if i in paths and not m.startswith(i + ".")}
        for m, p in paths.items()
    }

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph[todo.pop()] - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    reached = {m: reach(m) for m in graph}
    return {
        frozenset({m} | {o for o in reached[m] if m in reached[o]})
        for m in graph
        if m in reached[m]
    }


def test_no_modules_import_each_other_in_a_circle():
    assert circles() == set()


def test_no_module_imports_from_a_higher_floor():
    assert climbing() == set()


def test_the_bottom_floors_import_nothing_above_them():
    for path in (SRC / "ragloop" / "core").rglob("*.py"):
        assert {m for m in imports(path) if not m.startswith("ragloop.core")} == set(), path
    config = imports(SRC / "ragloop" / "config.py")
    assert {m for m in config if not m.startswith("ragloop.core")} == set()
