"""A user's `--rules FILE`, validated strictly against the shipped rules files.

Every check id, key and value type a rules file may hold is given by the checks' Settings
classes (checks/settings.py `schema()`, passed in by the callers that run checks; without it, the
keys of the shipped `rules/checks.toml`, generated from those classes), and every [[category]]
key is read from the shipped `rules/categories.toml`. Anything else
— a misspelled table, check id or key, a value of the wrong type, a pattern that is not a
regular expression — is an error (exit 2) naming the line, never silently ignored.

tomllib gives no line numbers for values, so the line of an offending key is found by scanning
the text for its table header and key (`Locator`).
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Iterable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from diagnose.errors import DiagnoseError, ExitCode
from diagnose.bounded_read import read_bounded

# The frame categories a rule may name (classify/categories.py sorts frames into them).
CATEGORIES = ("preprocess", "model", "postprocess", "sync", "io", "runtime", "other")


class BadRules(DiagnoseError):
    exit_code = ExitCode.USAGE


def builtin_rules_text(name: str) -> str:
    return resources.files("diagnose._rules").joinpath(name).read_text(encoding="utf-8")


MAX_RULES_BYTES = 4 << 20  # a rules file is a few kB; more is not a rules file
REGEX_KEYS = ("function", "file")  # pattern keys holding regular expressions


# --- what the shipped rules allow -------------------------------------------------------------

def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list of strings" if all(isinstance(v, str) for v in value) else "list"
    if isinstance(value, dict):
        return "table"
    return type(value).__name__


@lru_cache(maxsize=1)
def shipped() -> tuple[dict[str, dict[str, str]], dict[str, str], dict[str, str]]:
    """(check id -> {key: kind}, category entry key -> kind, pattern key -> kind)."""
    checks = tomllib.loads(builtin_rules_text("checks.toml")).get("checks", {})
    check_keys = {cid: {key: _kind(v) for key, v in values.items()}
                  for cid, values in checks.items()}
    entry_keys: dict[str, str] = {}
    pattern_keys: dict[str, str] = {}
    for entry in tomllib.loads(builtin_rules_text("categories.toml")).get("category", []):
        for key, value in entry.items():
            entry_keys.setdefault(key, _kind(value))
        for pattern in entry.get("patterns", []):
            for key, value in pattern.items():
                pattern_keys.setdefault(key, _kind(value))
    entry_keys["patterns"] = "list of tables"
    return check_keys, entry_keys, pattern_keys


# --- finding the line of a key ----------------------------------------------------------------

# Where a key sits in a rules document: table and key names, and indices into arrays of tables.
KeyPath = tuple[str | int, ...]

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY_PART = re.compile(r'"((?:[^"\\]|\\.)*)"|\'([^\']*)\'|([A-Za-z0-9_-]+)')


def _split_key(text: str) -> tuple[str, ...]:
    return tuple(m.group(1) if m.group(1) is not None else
                 m.group(2) if m.group(2) is not None else m.group(3)
                 for m in _KEY_PART.finditer(text))


class Locator:
    """Finds the line of a key path (`("checks", "lock_contention", "low")`, or with list
    indices: `("category", 0, "patterns", 1, "function")`) in a TOML text, best effort."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.blocks: list[tuple[KeyPath, int, int]] = []  # (header path, first line, end) 0-based
        counts: dict[tuple[str, ...], int] = {}
        start = 0
        path: KeyPath = ()
        for number, line in enumerate(self.lines):
            match = _HEADER.match(line)
            if not match:
                continue
            self.blocks.append((path, start, number))
            keys = _split_key(match.group(2))
            if match.group(1) == "[[":
                index = counts.get(keys, 0)
                counts[keys] = index + 1
                path = keys + (index,)
            else:
                path = keys
            start = number
        self.blocks.append((path, start, len(self.lines)))

    def line_of(self, path: KeyPath, value: object = None) -> int | None:
        """1-based line of the deepest part of `path` found, or None."""
        best, best_depth = None, -1
        for header, start, end in self.blocks:
            if header != path[:len(header)] or (not header and start == end):
                continue
            depth, line = len(header), (start if header else None)
            position = start + (1 if header else 0)
            rest = [k for k in path[len(header):] if isinstance(k, str)]
            for i, key in enumerate(rest):
                found = self._find_key(key, position, end,
                                       value if i == len(rest) - 1 else None)
                if found is None:
                    break
                depth, line, position = depth + 1, found, found
            if line is not None and depth > best_depth:
                best, best_depth = line + 1, depth
        return best

    def _find_key(self, key: str, start: int, end: int, value: object = None) -> int | None:
        token = re.compile(r'(?:^|[\s{,.])(?:"' + re.escape(key) + r'"|\'' + re.escape(key)
                           + r"'|" + re.escape(key) + r")\s*[=.]")
        hits = [n for n in range(start, end) if token.search(self._code(self.lines[n]))]
        if value is not None and isinstance(value, str) and len(hits) > 1:
            forms = (value, value.replace("\\", "\\\\").replace('"', '\\"'))
            for n in hits:
                if any(form and form in self.lines[n] for form in forms):
                    return n
        return hits[0] if hits else None

    @staticmethod
    def _code(line: str) -> str:
        """The line up to a comment (a `#` outside quotes)."""
        quote = None
        for i, ch in enumerate(line):
            if quote:
                if ch == quote:
                    quote = None
            elif ch in "\"'":
                quote = ch
            elif ch == "#":
                return line[:i]
        return line


# --- validation -------------------------------------------------------------------------------

def _suggest(word: object, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _type_ok(value: object, kind: str) -> bool:
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "list of strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind in ("list", "list of tables"):
        return isinstance(value, list)
    if kind == "table":
        return isinstance(value, dict)
    return True


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _dotted(path: KeyPath) -> str:
    return ".".join(str(part) for part in path)


class _Problem(Exception):
    def __init__(self, path: KeyPath, message: str, value: object = None) -> None:
        super().__init__(message)
        self.path, self.message, self.value = path, message, value


CheckSchema = dict[str, dict[str, str]]  # check id -> {key: kind}


def validate(data: dict[str, Any], text: str | None = None, where: str = "--rules file",
             checks: CheckSchema | None = None) -> dict[str, Any]:
    """Raises BadRules (exit 2) for the first problem of a user's rules, naming its line when
    `text` (the file's text) is given; returns `data` unchanged. `checks`: the keys and kinds of
    each check's settings (checks/settings.py `schema()`; by default the shipped tables')."""
    try:
        _validate(data, checks)
    except _Problem as problem:
        line = Locator(text).line_of(problem.path, problem.value) if text is not None else None
        raise BadRules(f"{where}{f', line {line}' if line else ''}: {problem.message}")
    return data


def _validate(data: object, schema: CheckSchema | None) -> None:
    if not isinstance(data, dict):
        raise _Problem((), "a rules file is a TOML document of [checks.<id>] tables and "
                           "[[category]] entries")
    for key, value in data.items():
        if key == "checks":
            _validate_checks(value, schema if schema is not None else shipped()[0])
        elif key == "category":
            _validate_categories(value)
        else:
            what = (f"unknown table [{key}]" if isinstance(value, (dict, list)) else
                    f"unknown key {key!r} outside any table")
            raise _Problem((key,), f"{what}{_suggest(key, ('checks', 'category'))}: a rules file "
                                   f"holds [checks.<id>] tables (check settings) and [[category]] "
                                   f"entries (frame patterns)")


def _validate_checks(checks: object, known: CheckSchema) -> None:
    if not isinstance(checks, dict):
        raise _Problem(("checks",), "'checks' must be a table of [checks.<id>] tables, "
                                    f"not {_kind(checks)}")
    for cid, values in checks.items():
        if cid not in known:
            raise _Problem(("checks", cid), f"unknown check id {cid!r} in [checks.{cid}]"
                                            f"{_suggest(cid, known)}; the checks are: "
                                            f"{', '.join(sorted(known))}")
        if not isinstance(values, dict):
            raise _Problem(("checks", cid), f"checks.{cid} must be a table of settings, "
                                            f"not {_kind(values)}")
        keys = known[cid]
        for key, value in values.items():
            path = ("checks", cid, key)
            if key not in keys:
                raise _Problem(path, f"unknown key {key!r} for check {cid!r}{_suggest(key, keys)}"
                                     f"; its keys are: {', '.join(sorted(keys))}")
            _check_value(path, value, keys[key])


def _check_value(path: KeyPath, value: object, kind: str, label: str | None = None) -> None:
    label = label or _dotted(path)
    if not _type_ok(value, kind):
        raise _Problem(path, f"{label} must be a {kind}, not {_kind(value)} "
                             f"({_shown(value)})", value)
    if kind == "number" and isinstance(value, (int, float)) and not math.isfinite(value):
        raise _Problem(path, f"{label} must be a finite number, not {value}", value)


def _validate_categories(entries: object) -> None:
    _, entry_keys, pattern_keys = shipped()
    if not isinstance(entries, list):
        raise _Problem(("category",), "'category' must be an array of [[category]] tables, "
                                      f"not {_kind(entries)}")
    for i, entry in enumerate(entries):
        where = ("category", i)
        if not isinstance(entry, dict):
            raise _Problem(where, f"category entry {i + 1} must be a table, not {_kind(entry)}")
        for key, value in entry.items():
            if key not in entry_keys:
                raise _Problem(where + (key,), f"unknown key {key!r} in [[category]] entry {i + 1}"
                                               f"{_suggest(key, entry_keys)}; its keys are: "
                                               f"{', '.join(sorted(entry_keys))}")
            if key != "patterns":
                _check_value(where + (key,), value, entry_keys[key],
                             f"{key!r} of [[category]] entry {i + 1}")
        name = entry.get("name")
        if name is None:
            raise _Problem(where, f"[[category]] entry {i + 1} has no 'name'; use one of "
                                  f"{', '.join(CATEGORIES)}")
        if name not in CATEGORIES:
            raise _Problem(where + ("name",), f"unknown category {name!r}{_suggest(name, CATEGORIES)}"
                                              f"; use one of {', '.join(CATEGORIES)}", name)
        patterns = entry.get("patterns", [])
        if not isinstance(patterns, list):
            raise _Problem(where + ("patterns",), f"patterns of {name!r} must be a list of "
                                                  f"tables, not {_kind(patterns)}")
        for j, pattern in enumerate(patterns):
            at = where + ("patterns", j)
            if not isinstance(pattern, dict):
                raise _Problem(where + ("patterns",), f"pattern {j + 1} of {name!r} must be a "
                                                      f"table like {{ function = \"...\" }}, not "
                                                      f"{_kind(pattern)} ({_shown(pattern)})")
            for key, value in pattern.items():
                if key not in pattern_keys:
                    raise _Problem(at + (key,), f"unknown key {key!r} in pattern {j + 1} of "
                                                f"{name!r}{_suggest(key, pattern_keys)}; a pattern "
                                                f"has {', '.join(sorted(pattern_keys))}")
                _check_value(at + (key,), value, pattern_keys[key],
                             f"{key!r} of pattern {j + 1} of {name!r}")
                if key in REGEX_KEYS:
                    try:
                        re.compile(value)
                    except re.error as exc:
                        raise _Problem(at + (key,), f"invalid regular expression {value!r} in "
                                                    f"{key!r} of a {name!r} pattern: {exc}", value)
            if not any(k in pattern for k in REGEX_KEYS):
                raise _Problem(where + ("patterns",), f"pattern {j + 1} of {name!r} needs "
                                                      f"'function' or 'file'")


# --- reading ----------------------------------------------------------------------------------

def load(path: str | Path, checks: CheckSchema | None = None) -> dict[str, Any]:
    """Reads and validates a user's rules file; BadRules (exit 2) for anything wrong with it.
    `checks`: as for validate()."""
    path = Path(path)
    raw = _read(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise BadRules(f"{path}, line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                       f"save the rules file as UTF-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadRules(f"{path}: not valid TOML: {exc}")
    return validate(data, text, str(path), checks)


def _read(path: Path) -> bytes:
    return read_bounded(path, "rules file", MAX_RULES_BYTES, BadRules)
