"""The profile as py-spy recorded it: frames, distinct stacks, and per-thread sample tracks.

Stacks are interned (a tuple of frame ids, root to leaf) so that classification runs once per
distinct stack rather than once per sample.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Hashable, Sequence
from typing import Any

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

# A profile's frame is the report's: one type for a stack frame, from the recording to the page.
from diagnose.report.model.sections import StackFrame as Frame


def frame_is(frame: Frame, suffix: str, pattern: re.Pattern[str]) -> bool:
    """`suffix` ends the frame's file, or, ending in "/", names a directory the file is in; and
    `pattern` is found in its function name."""
    where = (suffix in frame.file) if suffix.endswith("/") else frame.file.endswith(suffix)
    return where and bool(pattern.search(frame.function))


# Where a process multiprocessing started begins its own life: a forked child's Python stack
# keeps the frames of the parent's call that forked it (an event loop, a request handler, a
# `submit` to a process pool) outer of this frame; they never run again in the child.
_PROCESS_ENTRY = re.compile(r"(^|\.)_bootstrap$")


def own_frames_start(frames: Sequence[Frame]) -> int:
    """Index of a stack's first frame of the process's own (frames outer to inner): its innermost
    multiprocessing process entry (BaseProcess._bootstrap), where the frames outer of it are
    the parent's, copied at the fork; 0 where the stack has none."""
    for i in range(len(frames) - 1, -1, -1):
        frame = frames[i]
        if not frame.native and frame_is(frame, "multiprocessing/process.py", _PROCESS_ENTRY):
            return i
    return 0


_SEEN_TABLE_MAX = 1 << 27  # 128 MiB of bytes at most


def sorted_distinct(ids: npt.ArrayLike) -> np.ndarray:
    """`np.unique` of integer ids (stack, frame, thread ids, ticks): by a count table when they
    are non-negative and their range is small, else by pandas' hash table and a sort of the
    distinct ones; numpy 2's np.unique sorts or hashes every element, many times slower."""
    ids = np.asarray(ids)
    if not len(ids):
        return ids.copy()
    low, high = int(ids.min()), int(ids.max())
    if low >= 0 and high < 4 * len(ids) + 4096:
        return np.flatnonzero(np.bincount(ids)).astype(ids.dtype, copy=False)
    if high - low < min(_SEEN_TABLE_MAX, 64 * len(ids)):
        # a byte per value in the range (keys such as tick x thread span tens of millions):
        # one pass, where hashing every element costs ten times as much; not for a few ids
        # spread thinly over a wide range, where the table would cost more than the hashing
        seen = np.zeros(high - low + 1, dtype=bool)
        seen[ids - low] = True
        return (np.flatnonzero(seen) + low).astype(ids.dtype, copy=False)
    import pandas as pd

    return np.sort(pd.unique(ids))


def sums_by_code(codes: np.ndarray, counts: np.ndarray, n: int) -> list[tuple[int, float]]:
    """(code, summed count) for each code in 0..n-1 present among the rows, in code order: a
    group-by sum over integer codes (a categorical's, interned ids) by numpy; a code whose rows
    count 0 is present, as pandas' observed group-by keeps it. Float sums of sample counts are
    exact: they stay far below 2**53."""
    seen = np.bincount(codes, minlength=n)
    sums = np.bincount(codes, weights=counts, minlength=n)
    return [(int(k), float(sums[k])) for k in np.flatnonzero(seen)]


@dataclass
class ThreadTrack:
    tid: int
    name: str
    stack_ids: np.ndarray  # int32, one per sample, in sampling order
    weights: np.ndarray  # float64 seconds each sample stands for
    counts: np.ndarray | None = None  # int64 when a sample row stands for many (collapsed input)
    timed: bool = True  # False when the input has no sample order (collapsed files)
    pid: int | None = None  # the process, when py-spy sampled several (--subprocesses)
    # Measured instants (chrometrace input): each sample's time in seconds on the recorder's
    # clock. None when the input has no timestamps: samples are then laid end to end from the
    # window's start.
    times: np.ndarray | None = None
    # Measured tracks: the OS threads that ran in this track, as [OS tid, first seen, gone] on
    # the recorder's clock (gone: the window's end for a thread alive to the end). py-spy names a
    # thread by its pthread id, which a new thread reuses once an old one exited: like py-spy's
    # own outputs, such threads share one track, one after the other.
    segments: list[list[float]] | None = None
    # The recording itself, for measured tracks: the instants the stack changed (recorder
    # clock) and the stack held from each (the samples are read off these: readers/chrometrace.py).
    changes: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def started_s(self) -> float | None:
        """When the track's first thread was first seen (recorder clock), None if not measured."""
        return self.segments[0][1] if self.segments else None

    @property
    def ended_s(self) -> float | None:
        """When the track's last thread was gone (recorder clock), None if not measured."""
        return self.segments[-1][2] if self.segments else None


@dataclass
class Profile:
    frames: list[Frame] = field(default_factory=list)
    stacks: list[tuple[int, ...]] = field(default_factory=list)
    threads: list[ThreadTrack] = field(default_factory=list)
    native: bool = False
    calibrated: bool = False  # states come from native samples of the same window
    calibration_files: frozenset[str] = frozenset()  # native libraries seen by those samples
    source: str = ""  # "py-spy speedscope", "collapsed", ...
    interval_s: float = 0.01
    # How sample instants are known: "measured" (timestamps in the recording), "reconstructed"
    # (per-thread sample order only: laid end to end from t=0), "none" (no order at all).
    instants: str = "reconstructed"
    window: tuple[float, float] | None = None  # measured (start, end) on the recorder's clock
    # False when the recording cannot show waits (py-spy without --idle drops the samples of
    # threads that are not running): `waits_reason` says why it was concluded.
    waits_visible: bool = True
    waits_reason: str = ""

    _frame_index: dict[Frame, int] = field(default_factory=dict, repr=False)
    _stack_index: dict[tuple[int, ...], int] = field(default_factory=dict, repr=False)
    # Results computed once and shared by every reader of the profile (stack classification is
    # asked for at load time and again by the analysis): key -> {stack id or frame ids: value}.
    _memo: dict[Hashable, Any] = field(default_factory=dict, repr=False)

    def memo(self, key: Hashable) -> dict[Any, Any]:
        """A cache, for the profile's lifetime, of results that depend only on stacks or frames
        (and on `key`). Stack and frame ids never change meaning (both are only appended), so
        entries stay valid."""
        return self._memo.setdefault(key, {})

    def innermost_index(self, stack: int, frame_id: int) -> int:
        """The index in stack `stack` (outermost first) of its innermost frame `frame_id`: where
        a sample's site stands in its stack; -1 where the stack has no such frame."""
        ids = self.stacks[stack]
        return next((i for i in range(len(ids) - 1, -1, -1) if ids[i] == frame_id), -1)

    def stacks_with_any(self, frame_mask: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Per stack id: True when any of its frames is marked in `frame_mask` (per frame id),
        by numpy over the stacks' frames laid end to end, not a Python walk per stack."""
        flat, offsets = self.stack_frames()
        hits = np.zeros(len(flat) + 1, dtype=np.int64)
        if len(flat):
            np.cumsum(np.asarray(frame_mask, dtype=bool)[flat], out=hits[1:])
        return (hits[offsets[1:]] - hits[offsets[:-1]]) > 0

    def stack_frames(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Every stack's frame ids laid end to end (int64) and the offsets where each begins
        (one more than there are stacks); rebuilt when stacks were added."""
        cached = self._memo.get("stack_frames")
        if cached is None or cached[0] != len(self.stacks):
            lengths = np.fromiter(map(len, self.stacks), dtype=np.int64, count=len(self.stacks))
            offsets = np.zeros(len(self.stacks) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            flat = np.fromiter(itertools.chain.from_iterable(self.stacks), dtype=np.int64,
                               count=int(offsets[-1]))
            cached = self._memo["stack_frames"] = (len(self.stacks), flat, offsets)
        return cached[1], cached[2]

    def numbered_paths(self, stack_ids: npt.ArrayLike) -> tuple[list[int], dict[int, list[int]]]:
        """For the distinct stacks among `stack_ids`, taken in ascending id order: the frame ids
        they use, numbered in the order they first appear (root first), and each stack's path
        as those numbers. By numpy and pandas over the stacks' frames laid end to end: no
        Python work per frame of a stack."""
        import pandas as pd

        distinct = sorted_distinct(np.asarray(stack_ids, dtype=np.int64))
        flat, offsets = self.stack_frames()
        starts, lengths = offsets[distinct], offsets[distinct + 1] - offsets[distinct]
        bounds = np.zeros(len(distinct) + 1, dtype=np.int64)
        np.cumsum(lengths, out=bounds[1:])
        if not int(bounds[-1]):
            return [], {sid: [] for sid in distinct.tolist()}
        taken = flat[np.repeat(starts - bounds[:-1], lengths) + np.arange(int(bounds[-1]))]
        codes, used = pd.factorize(taken)
        code_list, bound_list = codes.tolist(), bounds.tolist()
        return used.tolist(), {sid: code_list[bound_list[i]:bound_list[i + 1]]
                               for i, sid in enumerate(distinct.tolist())}

    def intern_frame(self, frame: Frame) -> int:
        idx = self._frame_index.get(frame)
        if idx is None:
            idx = self._frame_index[frame] = len(self.frames)
            self.frames.append(frame)
        return idx

    def frame_id(self, frame: Frame) -> int:
        """The id of a frame already in the profile, -1 if absent."""
        return self._frame_index.get(frame, -1)

    def intern_stack(self, stack: tuple[int, ...]) -> int:
        idx = self._stack_index.get(stack)
        if idx is None:
            idx = self._stack_index[stack] = len(self.stacks)
            self.stacks.append(stack)
        return idx

    @property
    def pids(self) -> list[int]:
        """The processes the threads belong to, in first-seen order ([] when not recorded)."""
        return list(dict.fromkeys(t.pid for t in self.threads if t.pid is not None))

    def of_process(self, pid: int) -> "Profile":
        """The same profile restricted to one process's threads. Frames and stacks are shared
        (the same lists), so stack and frame ids mean the same in both."""
        sub = Profile(frames=self.frames, stacks=self.stacks,
                      threads=[t for t in self.threads if t.pid == pid], native=self.native,
                      calibrated=self.calibrated, calibration_files=self.calibration_files,
                      source=self.source, interval_s=self.interval_s, instants=self.instants,
                      window=self.window, waits_visible=self.waits_visible,
                      waits_reason=self.waits_reason)
        sub._frame_index, sub._stack_index, sub._memo = self._frame_index, self._stack_index, self._memo
        return sub

    def absorb(self, other: "Profile") -> None:
        """Adds another recording's threads (another root's tree), re-interning its frames."""
        frame_map = [self.intern_frame(f) for f in other.frames]
        stack_map = np.array([self.intern_stack(tuple(frame_map[i] for i in s)) for s in other.stacks],
                             dtype=np.int32)
        for t in other.threads:
            changes = (t.changes[0], stack_map[t.changes[1]] if len(t.changes[1]) else t.changes[1]
                       ) if t.changes is not None else None
            self.threads.append(ThreadTrack(t.tid, t.name, stack_map[t.stack_ids] if len(t.stack_ids)
                                            else t.stack_ids, t.weights, t.counts, t.timed, t.pid,
                                            t.times, t.segments, changes))
        self.native = self.native or other.native
        # Several recorders (one per named pid) started together: their clocks agree to within
        # the time between their starts, so one window spans them all.
        order = ("none", "reconstructed", "measured")
        self.instants = min(self.instants, other.instants, key=order.index)
        if self.window is not None and other.window is not None:
            self.window = (min(self.window[0], other.window[0]),
                           max(self.window[1], other.window[1]))
        else:
            self.window = self.window or other.window
        if self.waits_visible and not other.waits_visible:
            self.waits_visible, self.waits_reason = False, other.waits_reason

    @property
    def window_s(self) -> float | None:
        """The window's length as recorded (None when the recording has no timestamps)."""
        return None if self.window is None else self.window[1] - self.window[0]

    @property
    def origin_s(self) -> float:
        """The window's start on the recorder's clock: t=0 of the sample table."""
        return self.window[0] if self.window is not None else 0.0

    @property
    def total_samples(self) -> int:
        return int(sum(int(t.counts.sum()) if t.counts is not None else len(t.stack_ids)
                       for t in self.threads))
