"""The profile as py-spy recorded it: frames, distinct stacks, and per-thread sample tracks.

Stacks are interned (a tuple of frame ids, root to leaf) so that classification runs once per
distinct stack rather than once per sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: int
    native: bool

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclass
class ThreadTrack:
    tid: int
    name: str
    stack_ids: np.ndarray  # int32, one per sample, in sampling order
    weights: np.ndarray  # float64 seconds each sample stands for
    counts: np.ndarray | None = None  # int64 when a sample row stands for many (collapsed input)
    timed: bool = True  # False when the input has no sample order (collapsed files)
    pid: int | None = None  # the process, when py-spy sampled several (--subprocesses)


@dataclass
class Profile:
    frames: list[Frame] = field(default_factory=list)
    stacks: list[tuple[int, ...]] = field(default_factory=list)
    threads: list[ThreadTrack] = field(default_factory=list)
    native: bool = False
    calibrated: bool = False  # states come from native samples of the same window
    calibration_files: frozenset = frozenset()  # native libraries seen by those samples
    source: str = ""  # "py-spy speedscope", "collapsed", ...
    interval_s: float = 0.01

    _frame_index: dict = field(default_factory=dict, repr=False)
    _stack_index: dict = field(default_factory=dict, repr=False)

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
                      source=self.source, interval_s=self.interval_s)
        sub._frame_index, sub._stack_index = self._frame_index, self._stack_index
        return sub

    def absorb(self, other: "Profile") -> None:
        """Adds another recording's threads (another root's tree), re-interning its frames."""
        frame_map = [self.intern_frame(f) for f in other.frames]
        stack_map = np.array([self.intern_stack(tuple(frame_map[i] for i in s)) for s in other.stacks],
                             dtype=np.int32)
        for t in other.threads:
            self.threads.append(ThreadTrack(t.tid, t.name, stack_map[t.stack_ids] if len(t.stack_ids)
                                            else t.stack_ids, t.weights, t.counts, t.timed, t.pid))
        self.native = self.native or other.native

    @property
    def total_samples(self) -> int:
        return int(sum(int(t.counts.sum()) if t.counts is not None else len(t.stack_ids)
                       for t in self.threads))
