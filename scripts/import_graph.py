"""Prints the package-level import graph of diagnose/: which top-level part imports which.

A part is a subpackage of diagnose (collect, model, report, ...) or a top-level module
(errors, heap, pipeline, ...). Every import counts, at module level, inside a function or under
TYPE_CHECKING, read with `ast` (nothing is imported). An arrow "a -> b" is printed with how many
import statements make it.

    python scripts/import_graph.py              # the arrows, the back-arrows, the pairs of parts
                                                # that import each other, and the cycles
    python scripts/import_graph.py --mermaid    # the graph as a mermaid block
    python scripts/import_graph.py --mermaid --reduced   # without the arrows a path already
                                                         # implies (docs/architecture.md's picture)
    python scripts/import_graph.py --modules    # the module-level edges behind each back-arrow

The layer order (LAYERS, top first) is the one the import-linter contract in pyproject.toml
enforces: a back-arrow is an arrow from a lower layer to a higher one.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "diagnose"

# Top first; parts on one line are side by side (neither imports the other). Kept in step with
# [tool.importlinter] in pyproject.toml (tests/unit/test_import_layers.py checks that).
LAYERS: list[tuple[str, ...]] = [
    ("__main__",),
    ("cli",),
    ("demo", "load", "publish"),
    ("run",),
    ("render", "export"),
    ("checks", "compare"),
    ("model",),
    ("readers",),
    ("classify",),
    ("collect",),
    ("samples",),
    ("report", "outputs"),
    ("vocab",),
    ("errors", "heap", "bounded_read"),
]


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, name: str) -> list[str]:
    """Every diagnose module `path` imports (absolute or relative), by dotted name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            out.append(prefix)
            # `from diagnose.x import y` may import the module diagnose.x.y
            out.extend(f"{prefix}.{alias.name}" for alias in node.names)
    return [m for m in out if m == "diagnose" or m.startswith("diagnose.")]


def part_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def graph() -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], set[tuple[str, str]]]]:
    """(a, b) -> how many import statements of part a name part b; and the module pairs."""
    modules = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    parts = {part_of(m) for m in modules} - {None}
    counts: dict[tuple[str, str], int] = defaultdict(int)
    pairs: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for name, path in modules.items():
        src = part_of(name)
        if src is None:
            continue
        seen: set[str] = set()
        for target in imported_modules(path, name):
            dst = part_of(target)
            if dst is None or dst == src or dst not in parts:
                continue
            # count a statement once per target part, whichever names it carries
            key = f"{dst}:{target if target in modules else target.rsplit('.', 1)[0]}"
            if key in seen:
                continue
            seen.add(key)
            if target not in modules:
                target = target.rsplit(".", 1)[0]
                if target not in modules:
                    continue
            counts[(src, dst)] += 1
            pairs[(src, dst)].add((name, target))
    return dict(counts), dict(pairs)


def layer_index() -> dict[str, int]:
    return {part: i for i, layer in enumerate(LAYERS) for part in layer}


def back_arrows(counts: dict[tuple[str, str], int]) -> list[tuple[str, str]]:
    """Arrows that run up the layers, or sideways between parts of one layer; a part missing
    from LAYERS makes every arrow that touches it a back-arrow, so it is noticed."""
    index = layer_index()
    return sorted((a, b) for a, b in counts
                  if a not in index or b not in index or index[a] >= index[b])


def cycles(counts: dict[tuple[str, str], int]) -> list[list[str]]:
    """The strongly connected parts of more than one node (Tarjan)."""
    edges: dict[str, list[str]] = defaultdict(list)
    for a, b in counts:
        edges[a].append(b)
    nodes = sorted({n for edge in counts for n in edge})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for n in nodes:
        if n not in index:
            visit(n)
    return sorted(found)


def reduced(counts: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """The arrows no longer path between the same two parts implies (a transitive reduction;
    on a graph without cycles it is unique)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for a, b in counts:
        edges[a].add(b)

    def reaches(start: str, goal: str, skip: tuple[str, str]) -> bool:
        seen, todo = {start}, [start]
        while todo:
            node = todo.pop()
            for nxt in edges[node]:
                if (node, nxt) == skip or nxt in seen:
                    continue
                if nxt == goal:
                    return True
                seen.add(nxt)
                todo.append(nxt)
        return False

    return {edge: n for edge, n in counts.items() if not reaches(edge[0], edge[1], edge)}


def mermaid(counts: dict[tuple[str, str], int]) -> str:
    lines = ["```mermaid", "flowchart TD"]
    index = layer_index()
    ordered = sorted(counts, key=lambda e: (index.get(e[0], -1), e[0], index.get(e[1], -1), e[1]))
    for a, b in ordered:
        lines.append(f"    {a} --> {b}")
    lines.append("```")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mermaid", action="store_true", help="print the graph as a mermaid block")
    parser.add_argument("--reduced", action="store_true",
                        help="leave out the arrows a longer path already implies")
    parser.add_argument("--modules", action="store_true", help="print the module edges of each back-arrow")
    args = parser.parse_args(argv)
    counts, pairs = graph()
    if args.mermaid:
        print(mermaid(reduced(counts) if args.reduced else counts))
        return 0
    index = layer_index()
    back = back_arrows(counts)
    print(f"{len(counts)} arrows between {len({n for e in counts for n in e})} parts")
    for (a, b), n in sorted(counts.items(), key=lambda kv: (index.get(kv[0][0], -1), kv[0])):
        mark = "  BACK" if (a, b) in back else ""
        print(f"  {a:>9} -> {b:<9} {n:3d}{mark}")
    print(f"back-arrows: {len(back)}")
    for a, b in back:
        print(f"  {a} -> {b} ({counts[(a, b)]})")
        if args.modules:
            for src, dst in sorted(pairs[(a, b)]):
                print(f"      {src} -> {dst}")
    two_way = sorted({tuple(sorted(edge)) for edge in counts if (edge[1], edge[0]) in counts})
    print(f"two-way pairs: {len(two_way)}")
    for a, b in two_way:
        print(f"  {a} <-> {b}")
    found = cycles(counts)
    print(f"cycles: {len(found)}")
    for scc in found:
        print("  " + " <-> ".join(scc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
