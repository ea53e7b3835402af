"""The package tree tells the architecture (issue 18): packages by role, few modules directly in
`diagnose/`, no import cycle between its modules and no private name imported across them.

Read from the source with `ast`, nothing is imported: an import inside a function counts as
much as one at the top of a module (it runs all the same, only later)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "diagnose"
MAX_TOP_LEVEL_MODULES = 8


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute name `from <node.module> import ...` refers to in `module`."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if _is_package(path) else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _nearest(name: str, modules: dict[str, Path]) -> str | None:
    """`name` if it is a module of the package, else its nearest enclosing one (an attribute of
    a module imported by its dotted path)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _imports(module: str, path: Path, modules: dict[str, Path]):
    """(imported module, imported name or None, line) for every import of a `diagnose` module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "diagnose":
                    target = _nearest(alias.name, modules)
                    if target is not None:
                        yield target, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, path, node)
            if source.split(".")[0] != "diagnose":
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:  # `from diagnose.pkg import module`
                    yield submodule, None, node.lineno
                else:
                    target = _nearest(source, modules)
                    if target is not None:
                        yield target, alias.name, node.lineno


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _graph() -> dict[str, set[str]]:
    """module -> the modules it imports. Importing `a.b.c` also runs the `__init__` of `a` and
    `a.b`: an edge to each, except to the importer's own packages (already being imported
    whenever the importer runs)."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        own = set(_ancestors(name))
        for target, _, _ in _imports(name, path, modules):
            for reached in [*_ancestors(target), target]:
                if reached != name and reached in modules and reached not in own:
                    graph[name].add(reached)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = GREY
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour[nxt] == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if colour[nxt] == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = BLACK
        return None

    for start in sorted(graph):
        if colour[start] == WHITE:
            found = visit(start)
            if found:
                return found
    return None


def test_the_import_graph_is_read_from_the_source():
    graph = _graph()
    assert "diagnose.__main__" in graph
    assert graph["diagnose.__main__"], "diagnose/__main__.py imports the command line"


def test_no_import_cycle_inside_diagnose():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_at_most_eight_modules_directly_in_diagnose():
    top_level = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, top_level


def test_no_private_name_is_imported_from_another_module():
    modules = _modules()
    offences = []
    for name, path in modules.items():
        for target, imported, line in _imports(name, path, modules):
            if (imported is not None and imported.startswith("_") and not imported.startswith("__")
                    and target != name):
                offences.append(f"{path.relative_to(REPO)}:{line}: from {target} import {imported}")
    assert not offences, "\n".join(offences)


def test_the_cycle_finder_finds_a_cycle():
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None
