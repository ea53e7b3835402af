"""Count the string-key reads of a report in tests/: a subscript `x["key"]` or `x.get("key")`
whose key is a field of a report-model class (diagnose/report/model). A test that reads the
typed Report (`report.verdict.primary`) counts nothing; one that digs in the JSON dict counts
once per key read. Usage: python scripts/count_report_dict_reads.py [--by-file] [paths...]"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import sys
from collections import Counter
from pathlib import Path

import diagnose.report.model as model_pkg
from diagnose.report.model import codec  # noqa: F401  (the package's modules, loaded)


def report_field_names() -> set[str]:
    names: set[str] = set()
    import pkgutil
    import importlib
    for info in pkgutil.iter_modules(model_pkg.__path__):
        module = importlib.import_module(f"{model_pkg.__name__}.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if dataclasses.is_dataclass(cls) and cls.__module__.startswith(model_pkg.__name__):
                names.update(f.name for f in dataclasses.fields(cls))
    return names


def reads_in(path: Path, fields: set[str]) -> int:
    tree = ast.parse(path.read_text(), str(path))
    count = 0
    for node in ast.walk(tree):
        key = None
        if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant)
                and isinstance(node.ctx, ast.Load)):  # a read: not a test building input
            key = node.slice.value
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        if isinstance(key, str) and key in fields:
            count += 1
    return count


def main(argv: list[str]) -> int:
    by_file = "--by-file" in argv
    roots = [Path(a) for a in argv if not a.startswith("--")] or [Path("tests")]
    fields = report_field_names()
    counts: Counter[str] = Counter()
    for root in roots:
        for path in sorted(root.rglob("*.py") if root.is_dir() else [root]):
            n = reads_in(path, fields)
            if n:
                counts[str(path)] = n
    if by_file:
        for name, n in counts.most_common():
            print(f"{n:5d}  {name}")
    print(sum(counts.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
