"""A report's stacks as a pprof profile (google/pprof's profile.proto, gzipped), the format
`go tool pprof`, Pyroscope and most continuous-profiling tools read (docs/pprof.md).

One pprof Sample per row of the report's stacks table (`Report.stacks.samples`): its locations leaf first, its values
[samples/count, wall/nanoseconds], its labels thread, role, state, category (strings) and
pid, tid (numbers, when known). The profile pushed to Pyroscope leaves the thread name out:
Pyroscope's distributor makes every string label of a sample a series label (numeric ones are
dropped at ingest), and a name per thread opens a series per thread (`for_push`).
"""

from __future__ import annotations

import gzip
from numbers import Real
from pathlib import Path
from typing import cast

from diagnose.errors import BadProfile, OutputFailed
from diagnose.export import profile_pb2
from diagnose.outputs.files import WriteFailed, write_bytes
from diagnose.report.model import Report, StackFrame, StackRow, Stacks

SAMPLE_TYPES = (("samples", "count"), ("wall", "nanoseconds"))
STRING_LABELS = ("thread", "role", "state", "category")
PUSHED_STRING_LABELS = ("role", "state", "category")  # low cardinality: one series each
NUMBER_LABELS = ("pid", "tid")
# Marks a native (C/C++) frame's Function.system_name. A Python frame has no system name: its
# system_name is left empty, which tells pprof the name is final. Were it equal to the name, `go tool
# pprof` would take a name with <> or [] for demangled C++ and strip them: `<module>` and `<lambda>`
# would show as `<unknown>`.
NATIVE_PREFIX = "[native] "


def _real(value: object) -> float | None:
    """value when it is a real number (numbers.Real, so numpy's scalars too; not a bool), else
    None. Typed float: typeshed types numbers.Real's arithmetic as complex-like, and float is
    the real number of Python's typing."""
    if isinstance(value, Real) and not isinstance(value, bool):
        return cast(float, value)
    return None


class _StringTable:
    """pprof's interned strings: every name is an index into one list whose entry 0 is ""."""

    def __init__(self):
        self.strings = [""]
        self._index = {"": 0}

    def __call__(self, text: str) -> int:
        index = self._index.get(text)
        if index is None:
            index = self._index[text] = len(self.strings)
            self.strings.append(text)
        return index


def _stacks_of(report: Report) -> tuple[Stacks, float]:
    stacks = report.stacks
    if stacks.interval_s is None and not stacks.frames and not stacks.samples:
        raise BadProfile("the report predates stack export (it has no \"stacks\"): analyze its "
                         ".speedscope.json again with this diagnose to get one that can be "
                         "exported")
    interval = stacks.interval_s
    real_interval = _real(interval)
    if real_interval is None or not real_interval > 0:
        raise BadProfile(f"the report's stacks have no usable sampling interval "
                         f"(interval_s={interval!r})")
    return stacks, real_interval


def _add_frames(profile, frames: tuple[StackFrame, ...], intern: _StringTable) -> list[int]:
    """The Functions and Locations of the frame table; returns the location id of each frame.
    A Function is one (name, file, native); a Location one line of one Function."""
    function_ids: dict[tuple, int] = {}
    location_ids: dict[tuple, int] = {}
    ids = []
    for frame in frames:
        name, file, line, native = frame.function, frame.file, frame.line, frame.native
        function_key = (name, file, native)
        function_id = function_ids.get(function_key)
        if function_id is None:
            function_id = function_ids[function_key] = len(function_ids) + 1
            profile.function.add(id=function_id, name=intern(name), filename=intern(file),
                                 system_name=intern(NATIVE_PREFIX + name) if native else 0)
        location_key = (function_id, line)
        location_id = location_ids.get(location_key)
        if location_id is None:
            location_id = location_ids[location_key] = len(location_ids) + 1
            location = profile.location.add(id=location_id)
            location.line.add(function_id=function_id, line=line)
        ids.append(location_id)
    return ids


def _labels(row: StackRow, string_labels: tuple[str, ...]) -> tuple[list[tuple[str, str]],
                                                                    list[tuple[str, int]]]:
    """The row's string labels (those asked for) and number labels (when known)."""
    strings = [("thread", row.thread), ("role", row.role), ("state", row.state),
               ("category", row.category)]
    numbers = [("pid", row.pid), ("tid", row.tid)]
    return ([(k, v) for k, v in strings if k in string_labels],
            [(k, v) for k, v in numbers if v is not None])


def _add_sample(profile, row: StackRow, location_ids: list[int], period_ns: int,
                intern: _StringTable, string_labels: tuple[str, ...] = STRING_LABELS) -> None:
    try:
        # The report lists a stack root first; pprof wants the leaf first.
        leaf_first = [location_ids[index] for index in reversed(row.stack)]
    except IndexError:
        raise BadProfile(f"the report's stacks hold a malformed sample: {row!r}") from None
    sample = profile.sample.add(location_id=leaf_first, value=[row.count, row.count * period_ns])
    strings, numbers = _labels(row, string_labels)
    for key, text in strings:
        sample.label.add(key=intern(key), str=intern(text))
    for key, num in numbers:
        sample.label.add(key=intern(key), num=num)


def build_profile(report: Report, for_push: bool = False) -> profile_pb2.Profile:
    """The report's stacks as a pprof Profile; BadProfile when it has none (an older report).
    `for_push`: without the thread-name label (see the module docstring)."""
    stacks, interval = _stacks_of(report)
    # Every sample stands for one whole interval: wall = count * period, exactly.
    period_ns = round(interval * 1e9)
    intern = _StringTable()
    profile = profile_pb2.Profile()
    for kind, unit in SAMPLE_TYPES:
        profile.sample_type.add(type=intern(kind), unit=intern(unit))
    profile.period_type.type, profile.period_type.unit = intern("wall"), intern("nanoseconds")
    profile.period = period_ns
    duration = _real(report.sampling.duration_s)
    if duration is not None and duration > 0:
        profile.duration_nanos = round(duration * 1e9)
    # A live capture knows when its window began (sampling.started_at, unix seconds); a
    # recorded file analysed offline does not, and time_nanos stays 0.
    started = _real(report.sampling.started_at)
    if started is not None and started > 0:
        profile.time_nanos = round(started * 1e9)
    headline = report.verdict.headline
    if headline:
        profile.comment.append(intern(f"diagnose: {headline}"))
    location_ids = _add_frames(profile, stacks.frames, intern)
    for row in stacks.samples:
        _add_sample(profile, row, location_ids, period_ns, intern,
                    PUSHED_STRING_LABELS if for_push else STRING_LABELS)
    profile.string_table.extend(intern.strings)
    return profile


def pprof_bytes(report: Report, for_push: bool = False) -> bytes:
    """The gzipped serialized profile, as pprof files are stored (mtime 0: same report, same
    bytes)."""
    return gzip.compress(build_profile(report, for_push).SerializeToString(), mtime=0)


def write_pprof(report: Report, path: Path) -> Path:
    """Writes the profile to `path` whole or not at all (a temporary file beside it, renamed
    into place; an existing file at `path` is replaced). OutputFailed (exit 11) when it cannot
    be written; BadProfile (exit 6) when the report has no stacks, before anything is written."""
    path = Path(path)
    data = pprof_bytes(report)
    try:
        write_bytes(path, data)
    except WriteFailed as exc:
        raise OutputFailed(f"could not write {path}: {exc.reason}") from None
    return path
