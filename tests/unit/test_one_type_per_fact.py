"""One type per fact: no two dataclasses of two modules of diagnose carry the same set of field
names. Twins drift apart (a field added to one, a rounding done in one) and need a hand-built
copy between the stages that use them; the analysis uses the report model's type instead
(diagnose/report/ is the lowest layer, importable by every stage).

Every module under diagnose/ is imported and each dataclass it defines is keyed by its field
names. Classes named `Settings` are left out: each check declares its own knobs under that name
(checks/spec.py), and two checks sharing a knob's name is no shared fact. No size floor is
needed: no two dataclasses of fewer than 3 fields coincide today; if small ones start to (two
unrelated pairs), a floor of 3 fields is the place to add it.

Where two are different facts that happen to share names, ALLOWED says so, with the reason.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections import defaultdict

import diagnose

# Each entry: the classes (module.qualname) of one set of field names, and why they stay apart.
ALLOWED: dict[frozenset[str], str] = {}


def _modules() -> list:
    out = []
    for info in pkgutil.walk_packages(diagnose.__path__, "diagnose."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # runs the command line when imported
            continue
        out.append(importlib.import_module(info.name))
    return out


def _by_fields() -> dict[frozenset[str], set[str]]:
    """Dataclasses of diagnose by their set of field names (module.qualname each)."""
    groups: dict[frozenset[str], set[str]] = defaultdict(set)
    for module in _modules():
        for value in vars(module).values():
            if (isinstance(value, type) and dataclasses.is_dataclass(value)
                    and value.__module__ == module.__name__ and value.__name__ != "Settings"):
                names = frozenset(f.name for f in dataclasses.fields(value))
                groups[names].add(f"{value.__module__}.{value.__qualname__}")
    return groups


def test_no_two_modules_define_dataclasses_of_the_same_fields():
    twins = {tuple(sorted(fields)): classes for fields, classes in _by_fields().items()
             if len({c.rsplit(".", 1)[0] for c in classes}) > 1
             and frozenset(classes) not in ALLOWED}
    assert not twins, ("the same fields in two modules' dataclasses: make them one type (the "
                       f"report model's), or say in ALLOWED why they are different facts: {twins}")


def test_every_allowed_pair_still_exists():
    # An entry whose twins were merged or renamed is dead: removed, so the list stays the truth.
    present = {frozenset(classes) for classes in _by_fields().values()}
    assert set(ALLOWED) <= present, set(ALLOWED) - present
