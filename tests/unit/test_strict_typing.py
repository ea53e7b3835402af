"""The core packages are type-checked strictly (issue 18, item 6): CI runs `mypy diagnose`, and
pyproject.toml's overrides decide which modules it holds to the strict flags. Read through mypy's
own option resolution, so a narrowed module list or a dropped block fails here, not silently."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

mypy_options = pytest.importorskip("mypy.options")
mypy_config = pytest.importorskip("mypy.config_parser")

ROOT = Path(__file__).resolve().parents[2]
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs")
# Each returns one pandas result mypy sees as Any, left as is while their readers are rewritten.
RETURN_ANY_ALLOWED = {"diagnose.samples.profile", "diagnose.model.table"}


def _modules(package: str) -> list[str]:
    base = ROOT / package.replace(".", "/")
    names = []
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _options() -> object:
    options = mypy_options.Options()
    mypy_config.parse_config_file(options, lambda: None, str(ROOT / "pyproject.toml"),
                                  io.StringIO(), io.StringIO())
    return options


@pytest.mark.parametrize("package", ["diagnose.model", "diagnose.report", "diagnose.checks",
                                     "diagnose.classify", "diagnose.run", "diagnose.samples"])
def test_every_module_of_the_core_packages_is_checked_strictly(package):
    options = _options()
    modules = _modules(package)
    assert modules, package
    loose = {}
    for module in modules:
        resolved = options.clone_for_module(module)
        flags = [f for f in STRICT_FLAGS if not getattr(resolved, f)]
        if not resolved.warn_return_any and module not in RETURN_ANY_ALLOWED:
            flags.append("warn_return_any")
        if flags:
            loose[module] = flags
    assert not loose, loose

