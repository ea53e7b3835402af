"""JSON to the report's frozen types and back, read off the dataclass fields: one place that
knows how a field is written, so a new optional section is one field and no new code.

A field's metadata may say:
- `key`: the JSON name, when it differs from the field's (a renamed key reads its old name too,
  `old_keys`);
- `optional`: the key is left out when the value is None (the keys only some reports have);
  with `empty` too, also when the value is empty (OPTIONAL_EMPTY);
- `codec`: a (decode, encode) pair for a field whose JSON shape is not its type's (a finding's
  evidence: an object in JSON, labelled values in the model).

An enum is written as its value and read back as its member. A text enum (StrEnum: a severity,
a lever's kind, a process's role) reads a word this version does not know as that text, a plain
str (an edited or a newer report still reads and writes back as it was; it compares unequal to
every member); another enum's unknown value is not a report.

Decoding is lenient where reports always were (an absent key takes the field's default; an int
where a float is declared stays an int, so numbers read back equal) and strict where a report is
not one: an absent key without a default, a value of the wrong shape, or values the part's own
checks refuse (a ValueError of its constructor), is BadProfile naming the key's path.
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
# Left out when empty (a tuple, a mapping) as well as when None.
OPTIONAL_EMPTY: Mapping[str, Any] = types.MappingProxyType({"optional": True, "empty": True})


def _text_or_null(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise NotAReport("", f"a str expected, not {type(value).__name__}")
    return value


def _null_if_empty(value: str) -> str | None:
    return value or None


# A text field written as null when empty (and read back as "").
NULL_WHEN_EMPTY: Mapping[str, Any] = types.MappingProxyType(
    {"codec": (_text_or_null, _null_if_empty)})


class NotAReport(BadProfile):
    """A value that is not what the report's schema says, at `path`."""

    def __init__(self, path: str, what: str) -> None:
        super().__init__(f"{what} at {path}" if path else what)
        self.path = path
        self.what = what


# ------------------------------------------------------------------ encoding

# Both directions are compiled once per type from its fields (a report carries up to 50,000
# stack rows: no per-value reflection, and a key's path is spelled only when it is wrong).

Encoder = Callable[[Any], JsonValue]
Decoder = Callable[[JsonValue], Any]


def encode(value: object) -> JsonValue:
    """The JSON value of a report part (dataclass, tuple, mapping, enum or scalar)."""
    kind: Any = type(value)
    return _encoder(kind)(value) if _is_part(kind) else _any(value)


def _is_part(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) and isinstance(tp, type)


def _any(value: object) -> JsonValue:
    """A value of no declared shape (evidence, say): written as it is, parts and containers
    inside it encoded."""
    if value is None or type(value) in (int, float, str, bool):
        return value
    kind: Any = type(value)
    if _is_part(kind):
        return _encoder(kind)(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_any(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _any(v) for k, v in value.items()}
    return value


def _identity(value: object) -> JsonValue:
    return value


@functools.cache
def _encoder(tp: Any) -> Encoder:
    if _is_part(tp):
        return _dataclass_encoder(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and len(args) == 2:
            one = _encoder(inner[0])
            if one is _identity:
                return _identity
            return lambda v: None if v is None else one(v)
        return _any
    if origin is tuple:
        item = _encoder(args[0])
        if item is _identity:
            return list
        return lambda v: [item(x) for x in v]
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        value = _encoder(args[1]) if args else _any
        return lambda v: {str(k): value(x) for k, x in v.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return lambda v: v.value if isinstance(v, enum.Enum) else v
    if tp in _SCALARS:
        return _identity
    return _any


def _dataclass_encoder(cls: type) -> Encoder:
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        custom = f.metadata.get("codec")
        plan.append((f.name, f.metadata.get("key", f.name), bool(f.metadata.get("optional")),
                     bool(f.metadata.get("empty")), custom[1] if custom else _encoder(hints[f.name])))

    def write(v: Any) -> dict[str, JsonValue]:
        out: dict[str, JsonValue] = {}
        for name, key_, optional, empty, item in plan:
            value = getattr(v, name)
            if optional and (value is None or (empty and not value)):
                continue
            out[key_] = item(value)
        return out
    return write


# ------------------------------------------------------------------ decoding


def decode(cls: type[T], data: JsonValue, path: str = "") -> T:
    """`data` as an instance of the dataclass `cls`. NotAReport names the key's path (under
    `path`) when a key is missing or its value is of the wrong shape."""
    try:
        result: T = _decoder(typing.cast(Any, cls))(data)
    except _Wrong as exc:
        where = ".".join(p for p in (path, exc.where()) if p).replace(".[", "[")
        raise NotAReport(where, exc.what) from None
    return result


def decode_document(cls: type[T], data: object, required: tuple[str, ...]) -> T:
    """A whole saved document (a report, a sweep, an experiment) as `cls`: a JSON object with
    the `required` keys and a whole-number `schema_version`, said in that order before any
    deeper shape; a document nested too deeply for the decoder is NotAReport too."""
    if not isinstance(data, dict):
        raise NotAReport("", "not a JSON object")
    missing = [k for k in required if k not in data]
    if missing:
        raise NotAReport("", f"without {', '.join(missing)}")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise NotAReport("schema_version", "not a number")
    try:
        return decode(cls, data)
    except RecursionError:
        raise NotAReport("", "nested too deeply") from None


class _Wrong(Exception):
    """A value not of its declared shape; its path is gathered as the error climbs out."""

    def __init__(self, what: str, step: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.steps = [step] if step else []

    def under(self, step: str) -> _Wrong:
        self.steps.append(step)
        return self

    def where(self) -> str:
        return ".".join(reversed(self.steps)).replace(".[", "[")


@functools.cache
def _decoder(tp: Any) -> Decoder:
    """The function that checks a JSON value against the type `tp` and gives it as `tp`: a part
    (dataclass), an optional, a tuple, a mapping, an enum, a scalar; anything else as it is.
    Made once per type."""
    if _is_part(tp):
        return _dataclass_decoder(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and len(args) == 2:
            one = _decoder(inner[0])
            return lambda v: None if v is None else one(v)
        return _identity
    if origin is tuple:
        return _tuple_decoder(args[0])
    if origin in (dict, Mapping, typing.Mapping) or tp is dict:
        return _mapping_decoder(_decoder(args[1]) if args else _identity)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_decoder(tp)
    if tp in _SCALARS:
        return _scalar_decoder(tp)
    return _identity  # Any, object: JSON as it is


def _tuple_decoder(item_tp: Any) -> Decoder:
    """A list of `item_tp` as a tuple, each item decoded; its index named when one is wrong."""
    item = _decoder(item_tp)
    plain = _SCALARS.get(item_tp)

    def tuple_of(v: JsonValue) -> tuple[Any, ...]:
        if not isinstance(v, (list, tuple)):  # a tuple: a part built in this process
            raise _Wrong("a list expected")
        if plain is not None and all(type(x) in plain for x in v):
            return tuple(v)  # the common case, checked at once
        out = []
        for i, x in enumerate(v):
            try:
                out.append(item(x))
            except _Wrong as exc:
                raise exc.under(f"[{i}]") from None
        return tuple(out)
    return tuple_of


def _mapping_decoder(value: Decoder) -> Decoder:
    """An object as a dict of text keys, each value decoded by `value`; its key named when one
    is wrong."""
    def mapping_of(v: JsonValue) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise _Wrong("an object expected")
        out = {}
        for k, x in v.items():
            try:
                out[str(k)] = value(x)
            except _Wrong as exc:
                raise exc.under(str(k)) from None
        return out
    return mapping_of


def _enum_decoder(tp: type[enum.Enum]) -> Decoder:
    """A member of the enum `tp` by its value; a StrEnum keeps a word it does not know."""
    members = {m.value: m for m in tp}
    lenient = issubclass(tp, enum.StrEnum)

    def member(v: JsonValue) -> Any:
        found = members.get(v) if isinstance(v, (str, int)) else None
        if found is not None:
            return found
        if lenient and isinstance(v, str):
            # A word this version does not know (an edited report, a newer one): kept as
            # the text it is, so it still reads, compares and writes back unchanged.
            return v
        raise _Wrong(f"{v!r} is not one of {', '.join(str(m.value) for m in tp)}")
    return member


def _scalar_decoder(tp: type) -> Decoder:
    """A number, text or flag of the type `tp` (a numpy scalar as its Python value)."""
    accepted = _SCALARS[tp]
    name = tp.__name__

    def scalar(v: JsonValue) -> Any:
        if type(v) in accepted:
            return v
        if type(v).__module__ == "numpy":  # a figure straight from the analysis's tables
            v = v.item()
        if not isinstance(v, accepted) or (tp is not bool and isinstance(v, bool)):
            raise _Wrong(f"a {name} expected, not {type(v).__name__}")
        return v
    return scalar


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

    def build(v: JsonValue) -> Any:
        if not isinstance(v, dict):
            raise _Wrong("an object expected")
        kwargs = {}
        for name, names, required, item in plan:
            raw = v.get(names[0], _MISSING)
            if raw is _MISSING:
                raw = next((v[n] for n in names[1:] if n in v), _MISSING)
            if raw is _MISSING:
                if required:
                    raise _Wrong("missing", names[0])
                continue
            try:
                kwargs[name] = item(raw)
            except _Wrong as exc:
                raise exc.under(names[0]) from None
            except NotAReport as exc:  # a field's own codec (the evidence)
                raise _Wrong(exc.what, names[0]) from None
        try:
            return cls(**kwargs)
        except ValueError as exc:  # the part's own checks refuse the values (a sweep's settings)
            raise _Wrong(str(exc)) from None
    return build
