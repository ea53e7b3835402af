"""Generate reports/static/page/report.gen.d.ts: the TypeScript types of the report page's data,
read off the dataclasses that write it, so a renamed or retyped field fails TypeScript's check
of the page's script (tsc -p reports/static/page) as it fails mypy's of the Python.

Usage: python scripts/gen_page_types.py [--check]
  (no option) writes the file; --check exits 1 when the committed file is not what this writes
  (tests/unit/test_page_types_generated.py asserts the same).

The roots are the page data's dataclasses (ROOTS: the report, whole, and the words the page
reads beside it); every dataclass and enum their fields reach is found from them, so a new
section of the report (a field of Report holding a new dataclass) needs no change here:
regenerate the file. Each field is typed as the report model's codec (diagnose/report/model/
codec.py, `encode`) writes it:

- its JSON key (metadata `key`), optional (`name?:`) when the codec leaves it out when None
  (metadata `optional`; `empty` too: when empty), else `| null` where the value may be None;
- str: string; int, float: number; bool: boolean; a StrEnum: the union of its values;
- tuple[X, ...], list[X]: X[]; tuple[X, Y]: [X, Y]; dict / Mapping[str, X]: Record<string, X>;
- a dataclass: its interface, by name; Any, object (evidence values): Model.JsonValue;
- a field with its own codec (metadata `codec`): the type its encoder returns.

The types are declared in the namespace `Model` (Model.Report, Model.Finding, ...): the page's
scripts share the global scope with the DOM's types, and an interface of the same name as one
of those (the DOM declares `Report`, of the Reporting API) would merge with it silently.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import sys
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the worktree's diagnose, not an installed one
    sys.path.insert(0, str(REPO))

from diagnose.render.cpu_account_words import AccountWords  # noqa: E402
from diagnose.render.evidence import EvidenceRow  # noqa: E402
from diagnose.render.wording import GainWords  # noqa: E402
from diagnose.report.model import Report  # noqa: E402
from diagnose.report.model.deadlocks import ReportedDeadlock  # noqa: E402

OUTPUT = REPO / "reports" / "static" / "page" / "report.gen.d.ts"
COMMAND = "python scripts/gen_page_types.py"
NAMESPACE = "Model"
# The page data's dataclasses (render/html_data.py page_data, render/html.py render_html): its
# `report`, and the entries of `evidence_text` and `gain_text`; and an entry of the deadlock
# finding's `deadlocks` evidence, which the report holds as JSON of no declared shape.
ROOTS: tuple[type, ...] = (Report, EvidenceRow, GainWords, AccountWords, ReportedDeadlock)
JSON_VALUE = "JsonValue"

_SCALARS = {str: "string", int: "number", float: "number", bool: "boolean"}


class Unsupported(TypeError):
    """A field type the codec writes in no shape this generator can name."""


def _is_dataclass(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _is_enum(tp: object) -> bool:
    return isinstance(tp, type) and issubclass(tp, enum.Enum)


class _Types:
    """The dataclasses and enums reached from the roots, in the order first reached (depth
    first, fields in order), each written once."""

    def __init__(self) -> None:
        self.seen: dict[str, type] = {}  # TypeScript name -> class
        self.order: list[type] = []

    def name(self, cls: type) -> str:
        known = self.seen.get(cls.__name__)
        if known is not None and known is not cls:
            raise Unsupported(f"two classes named {cls.__name__}: {_qualified(known)} and "
                              f"{_qualified(cls)}; the page's types need distinct names")
        if known is None:
            self.seen[cls.__name__] = cls
            self.order.append(cls)
            if _is_dataclass(cls):
                for _, _, tp in _fields(cls):  # reach the field types now: discovery order
                    self.ts(tp)
        return cls.__name__

    def ts(self, tp: Any) -> str:
        """The TypeScript type of a value of Python type `tp` as the codec writes it."""
        if tp is Any or tp is object:
            return JSON_VALUE
        if tp is type(None):
            return "null"
        if tp in _SCALARS:
            return _SCALARS[tp]
        if _is_dataclass(tp) or _is_enum(tp):
            return self.name(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (typing.Union, types.UnionType):
            parts = [self.ts(a) for a in args if a is not type(None)]
            if type(None) in args:
                parts.append("null")
            return " | ".join(dict.fromkeys(parts))
        if origin in (tuple, list) or tp in (tuple, list):
            if not args:
                return f"{JSON_VALUE}[]"
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return "[" + ", ".join(self.ts(a) for a in args) + "]"
            return _array(self.ts(args[0]))
        if origin in (dict, Mapping, typing.Mapping) or tp in (dict, Mapping):
            value = self.ts(args[1]) if args else JSON_VALUE
            return f"Record<string, {value}>"
        raise Unsupported(f"no TypeScript type for {tp!r}")


def _array(item: str) -> str:
    return f"({item})[]" if " | " in item else f"{item}[]"


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _encoder_type(encode: Callable[..., Any]) -> Any:
    """What a field's own encoder (metadata `codec`) returns, by its annotation."""
    hints = typing.get_type_hints(encode)
    if "return" not in hints:
        raise Unsupported(f"the encoder {encode.__qualname__} does not annotate what it returns")
    return hints["return"]


def _fields(cls: type) -> list[tuple[dataclasses.Field[Any], str, Any]]:
    """Each field of `cls` as the codec writes it: (field, JSON key, the type written)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        custom = f.metadata.get("codec")
        written = _encoder_type(custom[1]) if custom else hints[f.name]
        out.append((f, f.metadata.get("key", f.name), written))
    return out


def _without_none(tp: Any) -> Any:
    """`tp` less its None: an optional field is left out instead of written as null."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        rest = tuple(a for a in typing.get_args(tp) if a is not type(None))
        if len(rest) == 1:
            return rest[0]
        return typing.Union[rest]  # noqa: UP007 (a value, built at run time)
    return tp


def _first_sentence(cls: type) -> str:
    """The first sentence of the class's docstring (its first paragraph's, on one line), or ""
    when it has none of its own (a dataclass's generated one is its signature)."""
    doc = cls.__dict__.get("__doc__") or ""
    if not doc or (_is_dataclass(cls) and doc.startswith(cls.__name__ + "(")):
        return ""
    paragraph = " ".join(inspect.cleandoc(doc).split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[:end + 1]


def _comment(cls: type, indent: str) -> list[str]:
    """The class's first sentence, and where the class is."""
    text = " ".join(p for p in (_first_sentence(cls), f"({_qualified(cls)})") if p)
    return [f"{indent}/** {text.replace('*/', '*' + chr(92) + '/')} */"]


def _key(name: str) -> str:
    return name if name.isidentifier() else '"' + name.replace('"', '\\"') + '"'


def _interface(cls: type, names: _Types, indent: str) -> list[str]:
    lines = _comment(cls, indent)
    lines.append(f"{indent}interface {cls.__name__} {{")
    for f, key, written in _fields(cls):
        if f.metadata.get("optional"):
            lines.append(f"{indent}  {_key(key)}?: {names.ts(_without_none(written))};")
        else:
            lines.append(f"{indent}  {_key(key)}: {names.ts(written)};")
    lines.append(f"{indent}}}")
    return lines


def _enum(cls: type[enum.Enum], indent: str) -> list[str]:
    import json

    lines = _comment(cls, indent)
    values = " | ".join(json.dumps(m.value, ensure_ascii=False) for m in cls)
    lines.append(f"{indent}type {cls.__name__} = {values};")
    return lines


def render(roots: tuple[type, ...] = ROOTS) -> str:
    """The text of report.gen.d.ts for `roots`."""
    names = _Types()
    for root in roots:
        names.name(root)
    indent = "  "
    body: list[str] = []
    for cls in names.order:
        body.append("")
        body.extend(_interface(cls, names, indent) if _is_dataclass(cls)
                    else _enum(typing.cast(type[enum.Enum], cls), indent))
    header = [
        f"// GENERATED by `{COMMAND}` from the dataclasses of the page's data:",
        "// do not edit; run it again after changing one (tests/unit/test_page_types_generated.py",
        "// fails until then). Each field is typed as the report model's codec",
        "// (diagnose/report/model/codec.py) writes it to JSON: `key?:` is left out when None (or",
        "// empty), `| null` is written as null. For TypeScript's checker only (tsconfig.json):",
        "// never part of the page (diagnose/render/html.py inlines the *.js parts alone).",
        "",
        f"/** The page data's types: {NAMESPACE}.Report is the report (diagnose/report/model), the",
        " *  whole .json file; EvidenceRow and GainWords are the entries of the page data's",
        " *  `evidence_text` and `gain_text` (diagnose/render/html_data.py, html.py); ReportedDeadlock",
        " *  an entry of the deadlock finding's `evidence.deadlocks`. */",
        f"declare namespace {NAMESPACE} {{",
        "  /** A JSON value of no declared shape, as the codec writes it (a finding's evidence). */",
        f"  type {JSON_VALUE} = null | boolean | number | string | {JSON_VALUE}[]"
        f" | {{ [key: string]: {JSON_VALUE} }};",
        "",
    ]
    return "\n".join(header + body[1:] + ["}", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the committed file differs from what would be written")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(REPO)} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(OUTPUT.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main())
