"""The checks' settings as typed objects: each check's Settings class (checks/spec.py) is the
schema of its [checks.<id>] table, filled from the shipped rules/checks.toml and a user's
--rules file (validated by classify/rules_file.py against `schema()`)."""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from functools import lru_cache
from importlib import resources
from typing import Any

from diagnose.checks.registry import SPECS
from diagnose.checks.spec import S, CheckSettings, CheckSpec

# The kinds of value a setting may hold, as a rules file's errors name them.
_KINDS: dict[object, str] = {float: "number", int: "number", bool: "boolean", str: "string",
                             tuple[str, ...]: "list of strings"}


def kind_of(annotation: object) -> str:
    return _KINDS[annotation]


def fields_of(settings: type[CheckSettings]) -> dict[str, str]:
    """{key: kind} of a Settings class: the keys its rules table may hold."""
    hints = typing.get_type_hints(settings)
    return {f.name: kind_of(hints[f.name]) for f in dataclasses.fields(settings)}


@lru_cache(maxsize=1)
def schema() -> dict[str, dict[str, str]]:
    """check id -> {key: kind}, for every check."""
    return {spec.id: fields_of(spec.settings) for spec in SPECS}


@lru_cache(maxsize=1)
def shipped_tables() -> dict[str, dict[str, Any]]:
    """The [checks.<id>] tables of the shipped rules/checks.toml."""
    text = resources.files("diagnose._rules").joinpath("checks.toml").read_text(encoding="utf-8")
    tables: dict[str, dict[str, Any]] = tomllib.loads(text).get("checks", {})
    return tables


def settings_from(settings: type[CheckSettings], values: dict[str, Any]) -> CheckSettings:
    """A Settings object from a table's values (already validated: TOML lists become tuples)."""
    fields: dict[str, object] = {key: tuple(value) if isinstance(value, list) else value
                                 for key, value in values.items()}
    return settings(**fields)  # type: ignore[arg-type]  # validated against the class's fields


def settings_of(spec: CheckSpec[S], settings: dict[str, CheckSettings]) -> S:
    """`spec`'s check's settings in `settings` (merged's result), as its own Settings class."""
    found = settings[spec.id]
    if not isinstance(found, spec.settings):  # merged() builds each from its spec's class
        raise TypeError(f"settings of {spec.id} are a {type(found).__name__}, not {spec.settings.__name__}")
    return found


def merged(user_checks: dict[str, dict[str, Any]] | None = None) -> dict[str, CheckSettings]:
    """Each check's settings: the shipped values, with a user's (validated) overrides."""
    shipped = shipped_tables()
    out = {}
    for spec in SPECS:
        values = dict(shipped.get(spec.id, {}))
        values.update((user_checks or {}).get(spec.id, {}))
        out[spec.id] = settings_from(spec.settings, values)
    return out
