"""Frame categories from the declarative rule packs in `rules/`."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from diagnose.errors import DiagnoseError, ExitCode
from diagnose.model.profile import Frame

CATEGORIES = ("preprocess", "model", "postprocess", "sync", "io", "runtime", "other")
PHASES = ("preprocess", "model", "postprocess")


class BadRules(DiagnoseError):
    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Pattern:
    category: str
    function: re.Pattern | None
    file: re.Pattern | None
    generic: bool

    def matches(self, frame: Frame) -> bool:
        if self.function is not None and not self.function.search(frame.function):
            return False
        if self.file is not None and not self.file.search(frame.file):
            return False
        return True


@dataclass(frozen=True)
class FrameCategory:
    category: str
    generic: bool  # matched only a generic pattern (numpy, BLAS): weak evidence of a phase


def _compile(text: str | None, where: str) -> re.Pattern | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise BadRules(f"{where}: invalid regular expression {text!r}: {exc}")


def parse_category_rules(data: dict, where: str) -> list[Pattern]:
    patterns = []
    for entry in data.get("category", []):
        name = entry.get("name")
        if name not in CATEGORIES:
            raise BadRules(f"{where}: unknown category {name!r}; use one of {', '.join(CATEGORIES)}")
        for raw in entry.get("patterns", []):
            if "function" not in raw and "file" not in raw:
                raise BadRules(f"{where}: a pattern of {name!r} needs 'function' or 'file'")
            patterns.append(Pattern(name, _compile(raw.get("function"), where),
                                    _compile(raw.get("file"), where), bool(raw.get("generic"))))
    return patterns


def load_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadRules(f"{path}: no such rules file")
    except tomllib.TOMLDecodeError as exc:
        raise BadRules(f"{path}: not valid TOML: {exc}")


def builtin_rules_text(name: str) -> str:
    return resources.files("diagnose._rules").joinpath(name).read_text(encoding="utf-8")


class Categorizer:
    """Categorizes frames, user patterns first, caching per frame."""

    def __init__(self, user_rules: dict | None = None):
        builtin = parse_category_rules(tomllib.loads(builtin_rules_text("categories.toml")),
                                       "built-in categories.toml")
        user = parse_category_rules(user_rules, "--rules file") if user_rules else []
        self.patterns = user + builtin
        self._cache: dict[Frame, FrameCategory] = {}

    def categorize(self, frame: Frame) -> FrameCategory:
        found = self._cache.get(frame)
        if found is None:
            found = FrameCategory("other", False)
            for pattern in self.patterns:
                if pattern.matches(frame):
                    found = FrameCategory(pattern.category, pattern.generic)
                    break
            self._cache[frame] = found
        return found

    def phase_of(self, frames: list[Frame]) -> str:
        """The innermost specific phase in the stack, else the innermost generic one, else other."""
        generic = None
        for frame in reversed(frames):
            cat = self.categorize(frame)
            if cat.category in PHASES:
                if not cat.generic:
                    return cat.category
                generic = generic or cat.category
        return generic or "other"
