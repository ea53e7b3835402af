"""How an evidence field declares its label and unit, once, on the field itself; and the check's
EVIDENCE table (key -> Evidence, checks/spec.py) derived from its evidence dataclasses.

    @dataclass(frozen=True, kw_only=True)
    class PoolWaitEvidence(Measurements):
        pool_wait_share: float = key("share of request-thread time waiting ...", U.PERCENT)
        holder: str | Omitted = shared_key(optional=True)

A `key` declares its own label; a `shared_key` takes the one checks/shared_evidence.py declares
for its name (the same measure in several checks reads one way). `optional`: the check may leave
the key out of the finding (its default is OMITTED).
"""

from __future__ import annotations

from dataclasses import MISSING, field, fields
from typing import Any

from diagnose.checks.measurements import OMITTED, Measurements
from diagnose.checks.shared_evidence import SHARED
from diagnose.report.model.labels import DASH, Evidence, Unit

_DECLARED = "evidence"  # the field's metadata key: its Evidence, or None for a shared one


def key(label: str, unit: Unit, *, optional: bool = False, estimable: bool = False,
        interval: bool = True, none: str = DASH, row: bool = True) -> Any:
    """A field of its own: its label and unit (and how a null reads, ...: labels.Evidence)."""
    declared = Evidence(label, unit, estimable=estimable, interval=interval, none=none, row=row)
    return _field(declared, optional)


def shared_key(*, optional: bool = False) -> Any:
    """A field declared in checks/shared_evidence.py under the field's own name."""
    return _field(None, optional)


def same_as(declared: Evidence, *, optional: bool = False) -> Any:
    """A field declared as another check's field is (the same measure, read the same way)."""
    return _field(declared, optional)


def _field(declared: Evidence | None, optional: bool) -> Any:
    metadata = {_DECLARED: declared}
    return field(default=OMITTED, metadata=metadata) if optional else field(metadata=metadata)


def declarations(*classes: type[Measurements]) -> dict[str, Evidence]:
    """The EVIDENCE table of a check whose findings carry these evidence classes: each field's
    declaration, in field order. A key two classes declare must read the same in both."""
    table: dict[str, Evidence] = {}
    for cls in classes:
        for f in fields(cls):
            if _DECLARED not in f.metadata:
                raise TypeError(f"{cls.__name__}.{f.name} declares no label: use key() or shared_key()")
            declared = f.metadata[_DECLARED] or SHARED[f.name]
            if table.setdefault(f.name, declared) != declared:
                raise TypeError(f"{cls.__name__}.{f.name} is declared differently elsewhere")
    return table


def optional_keys(cls: type[Measurements]) -> set[str]:
    """The keys the check may leave out (tests/unit/test_check_declarations.py looks for where
    the check sets each)."""
    return {f.name for f in fields(cls) if f.default is not MISSING}
