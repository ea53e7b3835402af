"""A check's evidence as a typed value, and the one conversion to a finding's {key: value}.

Each check declares its evidence as a frozen dataclass deriving from `Measurements`: one field
per evidence key, typed, with its label and unit declared on the field (checks/declare.py). The
check builds an instance; make_finding (checks/base.py) turns it into the finding's evidence with
`written`, so every check's values reach the report the same way.
"""

from __future__ import annotations

from dataclasses import Field, fields, is_dataclass
from enum import Enum
from typing import Any, ClassVar, Literal, TypeAlias

from diagnose.report.model.codec import encode
from diagnose.report.model.findings import Fix


class _Omitted(Enum):
    OMITTED = "omitted"


# A field's value when the check did not write the key: the finding has no such key (a null
# value, None, is written: it reads as the declaration's `none`).
OMITTED = _Omitted.OMITTED
Omitted: TypeAlias = Literal[_Omitted.OMITTED]


class Measurements:
    """The base of every check's evidence dataclass (`@dataclass(frozen=True, kw_only=True)`):
    its fields, in their declared order, are the finding's evidence keys in that order."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


def fix_value(fix: Fix) -> dict[str, object]:
    """A fix as the report's JSON has always written it: knob, the stage it names (if any), value."""
    return {"knob": fix.knob, **({"stage": fix.stage} if fix.stage else {}), "value": fix.value}


def _value(value: object) -> object:
    if isinstance(value, Fix):
        return fix_value(value)
    if isinstance(value, tuple) and value and all(isinstance(v, Fix) for v in value):
        return [fix_value(v) for v in value]  # several knobs, applied together
    if isinstance(value, tuple) and value and all(is_dataclass(v) for v in value):
        # report parts (a deadlock's cycles, report/model/deadlocks.py): as the report's codec
        # writes them, so the finding holds JSON whether or not it is written out
        return [encode(v) for v in value]
    return value


def written(measured: Measurements) -> dict[str, object]:
    """The evidence a finding carries: each field the check set, by its name, in declared order."""
    return {f.name: _value(getattr(measured, f.name)) for f in fields(measured)
            if getattr(measured, f.name) is not OMITTED}
