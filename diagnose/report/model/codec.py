"""JSON to the report's frozen types and back, read off the dataclass fields: one place that
knows how a field is written, so a new optional section is one field and no new code.

A field's metadata may say:
- `key`: the JSON name, when it differs from the field's (a renamed key reads its old name too,
  `old_keys`);
- `optional`: the key is left out when the value is None (the keys only some reports have);
- `codec`: a (decode, encode) pair for a field whose JSON shape is not its type's (a finding's
  evidence: an object in JSON, labelled values in the model).

Decoding is lenient where reports always were (an absent key takes the field's default; an int
where a float is declared stays an int, so numbers read back equal) and strict where a report is
not one: an absent key without a default, or a value of the wrong shape, is BadProfile naming
the key's path.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from diagnose.errors import BadProfile

T = TypeVar("T")

# JSON as read: any of these, nested.
JsonValue = Any

_SCALARS: dict[type, tuple[type, ...]] = {
    int: (int,), float: (int, float), str: (str,), bool: (bool,)}


def key(name: str, *, optional: bool = False, old_keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """Field metadata: written as `name`, read from it or any of `old_keys`."""
    return {"key": name, "optional": optional, "old_keys": old_keys}


OPTIONAL: Mapping[str, Any] = types.MappingProxyType({"optional": True})


class NotAReport(BadProfile):
    """A value that is not what the report's schema says, at `path`."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{what} at {path}" if path else what)
        self.path = path
        self.what = what


# ------------------------------------------------------------------ encoding


def encode(value: object) -> JsonValue:
    """The JSON value of a report part (dataclass, tuple, mapping, enum or scalar)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, JsonValue] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if item is None and f.metadata.get("optional"):
                continue
            custom = f.metadata.get("codec")
            out[f.metadata.get("key", f.name)] = custom[1](item) if custom else encode(item)
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [encode(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): encode(v) for k, v in value.items()}
    return value


# ------------------------------------------------------------------ decoding


def decode(cls: type[T], data: JsonValue, path: str = "") -> T:
    """`data` as an instance of the dataclass `cls`."""
    result: T = _decoder(typing.cast(Any, cls))(data, path)
    return result


Decoder = Callable[[JsonValue, str], Any]


@functools.cache
def _decoder(tp: Any) -> Decoder:
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_decoder(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and len(args) == 2:
            one = _decoder(inner[0])
            return lambda v, p: None if v is None else one(v, p)
        return _decoder(Any)
    if origin is tuple:
        item = _decoder(args[0])

        def tuple_of(v: JsonValue, p: str) -> tuple[Any, ...]:
            if not isinstance(v, (list, tuple)):  # a tuple: a part built in this process
                raise NotAReport(p, "a list expected")
            return tuple(item(x, f"{p}[{i}]") for i, x in enumerate(v))
        return tuple_of
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        value = _decoder(args[1]) if args else _decoder(Any)

        def mapping_of(v: JsonValue, p: str) -> dict[str, Any]:
            if not isinstance(v, dict):
                raise NotAReport(p, "an object expected")
            return {str(k): value(x, f"{p}.{k}") for k, x in v.items()}
        return mapping_of
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        def member(v: JsonValue, p: str) -> Any:
            try:
                return tp(v)
            except ValueError:
                raise NotAReport(p, f"{v!r} is not one of {', '.join(str(m.value) for m in tp)}"
                                 ) from None
        return member
    if tp in _SCALARS:
        accepted = _SCALARS[tp]
        name = tp.__name__

        def scalar(v: JsonValue, p: str) -> Any:
            if type(v).__module__ == "numpy":  # a figure straight from the analysis's tables
                v = v.item()
            if not isinstance(v, accepted) or (tp is not bool and isinstance(v, bool)):
                raise NotAReport(p, f"a {name} expected, not {type(v).__name__}")
            return v
        return scalar
    return lambda v, p: v  # Any, object: JSON as it is


_MISSING = object()


def _dataclass_decoder(cls: type) -> Decoder:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        names = (f.metadata.get("key", f.name), *f.metadata.get("old_keys", ()))
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        custom = f.metadata.get("codec")
        plan.append((f.name, names, required, custom[0] if custom else _decoder(hints[f.name])))

    def build(v: JsonValue, p: str) -> Any:
        if not isinstance(v, dict):
            raise NotAReport(p, "an object expected")
        kwargs = {}
        for name, names, required, item in plan:
            raw = next((v[n] for n in names if n in v), _MISSING)
            if raw is _MISSING:
                if required:
                    where = f"{p}.{names[0]}" if p else names[0]
                    raise NotAReport(where, "missing")
                continue
            kwargs[name] = item(raw, f"{p}.{names[0]}" if p else names[0])
        return cls(**kwargs)
    return build
