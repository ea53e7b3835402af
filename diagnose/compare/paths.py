"""Which source files of two reports are the same code, wherever each was installed.

A fix deployed as a new release runs the same modules from another directory
(`/srv/app-1.2.3/` then `/srv/app-1.2.4/`, another virtualenv's `site-packages`, a container's
`/app` against a checkout's `$REPO`). A file is therefore matched on its path relative to a
root, never on its absolute path:

* installed code on the part after its last `site-packages` or `dist-packages` (so two
  virtualenvs, or two Python versions, hold the same packages);
* the standard library on the part after `lib/pythonX.Y` (or a Windows `PythonXY\\Lib`);
* the program's own code on the part after a release prefix, found from the two reports: for
  every pair of files with the same name, the longest common suffix of their paths gives a pair
  of prefixes (`/srv/app-1.2.3`, `/srv/app-1.2.4`); the pair under which the most functions of
  the two reports coincide is taken, its files set aside, and the next pair looked for among
  the rest (code from several roots). A pair of prefixes counts only when a function other than
  module-level code (`<module>`) coincides under it: two scripts that happen to share a file
  name are not the same program.

Paths are split on `/` and `\\`, so Windows paths and relative paths match too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from diagnose.compare.model import PathMatching, PathRoot
from diagnose.report.model import StackFrame

_SEPARATORS = re.compile(r"[/\\]+")
_COMPONENT = re.compile(r"[^/\\]+")
_INSTALLED = frozenset({"site-packages", "dist-packages"})
_PYTHON_DIR = re.compile(r"python\d[\d.]*t?", re.IGNORECASE)
_WINDOWS_PYTHON_DIR = re.compile(r"python\d+t?(-32|-arm64)?", re.IGNORECASE)
MODULE_LEVEL = "<module>"
MAX_ROOTS = 8
MATCHING_RULE = ("function and path relative to the package root (site-packages, the standard "
                 "library) or to the release directory (the longest common path suffix)")


def parts(file: str | None) -> tuple[str, ...]:
    """A path's components, on either separator; "." components dropped."""
    return tuple(p for p in _SEPARATORS.split(str(file or "")) if p and p != ".")


def library_key(path: tuple[str, ...]) -> str | None:
    """The key of installed code or of the standard library (its path under the root it was
    installed in), else None (the program's own code)."""
    for i in range(len(path) - 2, -1, -1):
        if path[i].lower() in _INSTALLED:
            return "site-packages/" + "/".join(path[i + 1:])
    for i in range(len(path) - 2, 0, -1):
        part, parent = path[i], path[i - 1]
        if (part.lower() in ("lib", "lib64") and i + 1 < len(path)
                and _PYTHON_DIR.fullmatch(path[i + 1]) and i + 2 < len(path)):
            return "lib/python/" + "/".join(path[i + 2:])
        if part.lower() == "lib" and _WINDOWS_PYTHON_DIR.fullmatch(parent):
            return "lib/python/" + "/".join(path[i + 1:])
    return None


def is_library(file: str | None) -> bool:
    """Installed packages, the standard library and pseudo-files (`<frozen ...>`, `<string>`)."""
    text = str(file or "")
    return text.startswith("<") or library_key(parts(text)) is not None


def _common_suffix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _prefix_text(original: str, keep: int) -> str:
    """`original` without its last `keep` components, as it was written (separators kept)."""
    starts = [m.start() for m in _COMPONENT.finditer(original) if m.group() != "."]
    if keep >= len(starts):
        return ""
    head = original[:starts[len(starts) - keep]]
    return head.rstrip("/\\") or head


@dataclass(frozen=True)
class Root:
    """A pair of prefixes under which the two reports hold the same files."""

    before: tuple[str, ...]
    after: tuple[str, ...]
    before_text: str
    after_text: str
    functions: int  # functions that coincide under it
    files: int  # files that coincide under it


@dataclass(frozen=True)
class FileMatch:
    """How the files of BEFORE and AFTER are matched; `key(side, file)` is the same string for
    the same code on both sides (side 0: BEFORE, 1: AFTER)."""

    roots: tuple[Root, ...] = ()

    def key(self, side: int, file: str | None) -> str:
        path = parts(file)
        text = str(file or "")
        if text.startswith("<"):
            return text
        library = library_key(path)
        if library is not None:
            return library
        best: tuple[str, ...] | None = None
        for root in self.roots:
            prefix = root.before if side == 0 else root.after
            if path[:len(prefix)] == prefix and len(path) > len(prefix) and (
                    best is None or len(prefix) > len(best)):
                best = prefix
        rest = path[len(best):] if best is not None else path
        return "/".join(rest)

    @property
    def same_paths(self) -> bool:
        return all(root.before == root.after for root in self.roots)

    def describe(self) -> PathMatching:
        """For the diff JSON and page: how the two reports' files were matched."""
        moved = tuple(PathRoot(before=r.before_text or "(relative path)",
                               after=r.after_text or "(relative path)",
                               files=r.files, functions=r.functions)
                      for r in self.roots if r.before != r.after)
        note = None
        if moved:
            pairs = "; ".join(f"{r.before} ↔ {r.after} ({r.files} file"
                              f"{'' if r.files == 1 else 's'})" for r in moved)
            note = (f"the two reports ran the same code from different directories; "
                    f"frames were matched by function and path relative to: {pairs}")
        return PathMatching(rule=MATCHING_RULE, same_paths=not moved, roots=moved, note=note)


def _own_files(frames: Iterable[StackFrame]) -> OwnFiles:
    """{path components: (the path as written, its functions)} of the program's own code."""
    out: OwnFiles = {}
    for frame in frames:
        file = frame.file
        if frame.native or not file or is_library(file):
            continue
        path = parts(file)
        if path:
            out.setdefault(path, (file, set()))[1].add(frame.function)
    return out


OwnFiles = dict[tuple[str, ...], tuple[str, set[str]]]
FilePairs = list[tuple[tuple[str, ...], tuple[str, ...]]]


def _score(before: OwnFiles, after: OwnFiles, prefix_b: tuple[str, ...],
           prefix_a: tuple[str, ...]) -> tuple[int, int, FilePairs]:
    """(functions coinciding other than module level, all coinciding, the matched file pairs)
    under the pair of prefixes."""
    under_a = {path[len(prefix_a):]: path for path in after
               if path[:len(prefix_a)] == prefix_a and len(path) > len(prefix_a)}
    strong = total = 0
    pairs = []
    for path, (_, functions) in before.items():
        if path[:len(prefix_b)] != prefix_b or len(path) <= len(prefix_b):
            continue
        other = under_a.get(path[len(prefix_b):])
        if other is None:
            continue
        common = functions & after[other][1]
        if common:
            pairs.append((path, other))
            total += len(common)
            strong += len(common - {MODULE_LEVEL})
    return strong, total, pairs


def match_files(before_frames: Iterable[StackFrame], after_frames: Iterable[StackFrame]
                ) -> FileMatch:
    before, after = _own_files(before_frames), _own_files(after_frames)
    by_name: dict[str, list[tuple[str, ...]]] = {}
    for path in after:
        by_name.setdefault(path[-1], []).append(path)
    roots: list[Root] = []
    for _ in range(MAX_ROOTS):
        candidates: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()
        for path_b in before:
            for path_a in by_name.get(path_b[-1], ()):
                if path_a not in after:
                    continue
                keep = _common_suffix(path_b, path_a)
                candidates.add((path_b[:len(path_b) - keep], path_a[:len(path_a) - keep]))
        best: tuple[tuple[int, int, bool, int], tuple[str, ...], tuple[str, ...], int,
                    FilePairs] | None = None
        for prefix_b, prefix_a in sorted(candidates):
            strong, total, pairs = _score(before, after, prefix_b, prefix_a)
            # identical prefixes need no other evidence: the very same file on both sides
            if not pairs or (strong == 0 and prefix_b != prefix_a):
                continue
            rank = (strong, total, prefix_b == prefix_a, -len(prefix_b) - len(prefix_a))
            if best is None or rank > best[0]:
                best = (rank, prefix_b, prefix_a, total, pairs)
        if best is None:
            break
        _, prefix_b, prefix_a, total, pairs = best
        example_b, example_a = pairs[0]
        roots.append(Root(
            prefix_b, prefix_a,
            _prefix_text(before[example_b][0], len(example_b) - len(prefix_b)),
            _prefix_text(after[example_a][0], len(example_a) - len(prefix_a)),
            total, len(pairs)))
        for path_b, path_a in pairs:
            del before[path_b], after[path_a]
        if not before or not after:
            break
    return FileMatch(tuple(roots))
