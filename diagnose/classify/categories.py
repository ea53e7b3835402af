"""Frame categories from the declarative rule packs in `rules/`."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterable

import numpy as np

from diagnose.classify.rules_file import BadRules, builtin_rules_text, load, validate
# The categories frames are sorted into, declared with the rules that may name them: this
# module's to export (the sample table's leaf categories).
from diagnose.classify.rules_file import CATEGORIES as CATEGORIES
from diagnose.samples.profile import Frame

PHASES = ("preprocess", "model", "postprocess")


@dataclass(frozen=True)
class Pattern:
    category: str
    function: re.Pattern[str] | None
    file: re.Pattern[str] | None
    generic: bool
    framework: bool = False  # a framework library's own frames: they take their caller's phase
    # Matches a method's or nested function's name only, where the profile's names carry their
    # class (CPython 3.11+): a module-level `predict` is the service's request handler as often
    # as its model, and the code it calls (a Model's method, a framework) says which.
    methods_only: bool = False

    @property
    def names_a_library(self) -> bool:
        """A library-path pattern (it names files): it decides before function-name patterns."""
        return self.file is not None

    def matches(self, frame: Frame, qualified: bool = False) -> bool:
        if self.methods_only and qualified and not frame.native and "." not in frame.function:
            return False
        if self.function is not None and not self.function.search(frame.function):
            return False
        if self.file is not None and not self.file.search(frame.file):
            return False
        return True


@dataclass(frozen=True)
class FrameCategory:
    category: str
    generic: bool  # matched only a generic pattern (numpy, BLAS): weak evidence of a phase
    framework: bool = False  # a framework library's internals (torch, onnxruntime, numpy, BLAS)


def _compile(text: str | None, where: str) -> re.Pattern[str] | None:
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise BadRules(f"{where}: invalid regular expression {text!r}: {exc}")


def parse_category_rules(data: dict[str, Any], where: str) -> list[Pattern]:
    patterns = []
    for entry in data.get("category", []):
        name = entry.get("name")
        if name not in CATEGORIES:
            raise BadRules(f"{where}: unknown category {name!r}; use one of {', '.join(CATEGORIES)}")
        for raw in entry.get("patterns", []):
            if "function" not in raw and "file" not in raw:
                raise BadRules(f"{where}: a pattern of {name!r} needs 'function' or 'file'")
            patterns.append(Pattern(name, _compile(raw.get("function"), where),
                                    _compile(raw.get("file"), where), bool(raw.get("generic")),
                                    bool(raw.get("framework")), bool(raw.get("methods_only"))))
    return patterns


def names_qualified(frames: Iterable[Frame]) -> bool:
    """The profile names Python functions by their qualified name (`Model.predict`: py-spy on
    CPython 3.11+); before 3.11 a method is its bare name, and no name holds a dot."""
    return any(not f.native and "." in f.function for f in frames)


def load_toml(path: Path) -> dict[str, Any]:
    """A user's rules file, read and validated strictly (diagnose/classify/rules_file.py)."""
    return load(path)


class Categorizer:
    """Categorizes frames, caching per frame.

    Precedence: the user's patterns (in file order); then the built-in library-path patterns of
    the phases (patterns with a `file`: torch, onnxruntime, numpy, PIL, json, ...); then the
    built-in function-name patterns of the phases (softmax, resize, forward, ...); then the
    sync / io / runtime patterns in file order. A native frame of a library that a built-in
    sync / io / runtime pattern names (libpython, libc, CPython's C sources) never takes a phase
    from its function name: libpython's `list_resize` is not image resizing.
    """

    def __init__(self, user_rules: dict[str, Any] | None = None) -> None:
        builtin = parse_category_rules(tomllib.loads(builtin_rules_text("categories.toml")),
                                       "built-in categories.toml")
        if user_rules:
            validate(user_rules)
        user = parse_category_rules(user_rules, "--rules file") if user_rules else []
        phase_paths = [p for p in builtin if p.category in PHASES and p.names_a_library]
        phase_names = [p for p in builtin if p.category in PHASES and not p.names_a_library]
        others = [p for p in builtin if p.category not in PHASES]
        self._tiers = (user, phase_paths, phase_names, others)
        self.patterns = [p for tier in self._tiers for p in tier]  # in the order they are tried
        # Libraries the non-phase patterns name by path alone (libpython, libc, ...).
        self._system_libraries = [p.file for p in others if p.file is not None and p.function is None]
        # by what a category depends on (not the line: call sites of one function share it)
        self._cache: dict[tuple[str, str, bool, bool], FrameCategory] = {}

    def _in_system_library(self, frame: Frame) -> bool:
        return frame.native and any(lib.search(frame.file) for lib in self._system_libraries)

    def categorize(self, frame: Frame, qualified: bool = False) -> FrameCategory:
        """The frame's category; `qualified`: the profile names methods by their class
        (names_qualified), so a pattern for methods only passes over module-level functions."""
        key = (frame.function, frame.file, frame.native, qualified)
        found = self._cache.get(key)
        if found is None:
            found = FrameCategory("other", False)
            skip = self._tiers[2] if self._in_system_library(frame) else None
            pattern = next((p for tier in self._tiers if tier is not skip
                            for p in tier if p.matches(frame, qualified)), None)
            if pattern is not None:
                found = FrameCategory(pattern.category, pattern.generic, pattern.framework)
            self._cache[key] = found
        return found

    def phases_of_stacks(self, frames: list[Frame], flat: np.ndarray, offsets: np.ndarray
                         ) -> tuple[list[str], list[str]]:
        """`phase_of` and the leaf frame's category of every stack, for stacks given as frame ids
        laid end to end (`flat`, `offsets`: Profile.stack_frames) into `frames`. Each frame is
        categorized once; the stacks are read by numpy: a stack's phase is that of its innermost
        frame of the highest rank (what `phase_of` finds walking from the leaf)."""
        n = len(offsets) - 1
        qualified = names_qualified(frames)
        cats = [self.categorize(f, qualified) for f in frames]
        rank = np.array([0 if c.category not in PHASES else 1 if c.generic else 2 if c.framework else 3
                         for c in cats], dtype=np.int64)
        names = np.array([c.category for c in cats] + ["other"], dtype=object)
        lengths = np.diff(offsets)
        phases = np.full(n, "other", dtype=object)
        leaves = np.full(n, "other", dtype=object)
        filled = np.flatnonzero(lengths > 0)
        if len(filled) and len(flat):
            span = int(lengths.max()) + 1
            position = np.arange(len(flat), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
            key = rank[flat] * span + position
            best = np.maximum.reduceat(key, offsets[filled])
            at = np.where(best // span > 0, flat[offsets[filled] + best % span], len(frames))
            phases[filled] = names[at]
            leaves[filled] = names[flat[offsets[filled + 1] - 1]]
        return phases.tolist(), leaves.tolist()

    def phase_of(self, frames: list[Frame], qualified: bool | None = None) -> str:
        """The phase of a sample whose stack is `frames` (root first).

        The innermost frame that has a phase and is not a framework's internals decides:
        application code, a phase's own library (PIL, json) or a framework's model entry point
        (onnxruntime's `Session.run`). Framework frames (torch, onnxruntime, numpy, BLAS: `framework`
        patterns) take the phase of the code that called them, so `softmax` inside a model's
        `forward` is model and numpy inside `preprocess` is preprocessing; only a stack with no
        other phase frame gets its phase from them, a generic one (numpy, BLAS) last.
        """
        best, phase = 0, "other"
        if qualified is None:
            qualified = names_qualified(frames)
        for frame in reversed(frames):
            cat = self.categorize(frame, qualified)
            if cat.category not in PHASES:
                continue
            rank = 1 if cat.generic else 2 if cat.framework else 3
            if rank > best:
                best, phase = rank, cat.category
                if rank == 3:
                    break
        return phase
