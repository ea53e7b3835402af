"""Run-length rows: consecutive identical samples of a thread held as one row with a count.

A py-spy thread that waits or runs one function holds the same stack for many samples in a
row; the sample table keeps such a run as one row (`count` = its samples, `t` = its first
sample's instant), which cuts every per-row pass and the table's memory. Only a thread whose
samples are laid end to end at one fixed step (py-spy's reconstructed instants: no timestamps,
no counts of its own, every weight alike) is merged, so a run's instants are known exactly:
its first one plus a step per sample. The few readers that need instants (holders at the
same tick, threads per tick, the timeline) expand the rows they read with `instants`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from diagnose.samples.profile import Profile, ThreadTrack


def run_step_s(track: ThreadTrack) -> float | None:
    """The fixed step between the track's samples when its rows may be runs, else None."""
    if track.times is not None or track.counts is not None or not track.timed or not len(track.weights):
        return None
    first = float(track.weights[0])
    # one comparison in C: py-spy weighs every sample of a profile alike
    return first if bool((track.weights == first).all()) else None


def run_starts(stack_ids: np.ndarray, unmerged_stacks: npt.NDArray[np.bool_] | None) -> np.ndarray:
    """Indices where a run begins: the stack changes, or the sample's stack is never merged
    (a calibrated stack whose samples get a spread of states, one per sample)."""
    n = len(stack_ids)
    starts = np.ones(n, dtype=bool)
    if n > 1:
        np.not_equal(stack_ids[1:], stack_ids[:-1], out=starts[1:])
    if unmerged_stacks is not None and n:
        starts |= unmerged_stacks[stack_ids]
    return np.flatnonzero(starts)


def thread_steps(profile: Profile) -> npt.NDArray[np.float64]:
    """Per thread index: the step of its merged runs, NaN where each row is one instant. (Not
    kept in the profile's memo: a process's profile shares that memo with the whole tree's.)"""
    steps = [run_step_s(track) for track in profile.threads]
    return np.array([np.nan if s is None else s for s in steps], dtype=np.float64)


@dataclass(frozen=True)
class Instants:
    """The sample instants of some rows: for each, the row it belongs to and its time."""

    row: npt.NDArray[np.int64]
    t: npt.NDArray[np.float64]


def instants_per_row(thread: np.ndarray, count: np.ndarray, steps: npt.NDArray[np.float64]) -> np.ndarray:
    """How many instants each row stands for: its count in a merged thread, else 1."""
    merged = ~np.isnan(steps)
    if not merged.any():
        return np.ones(len(thread), dtype=np.int64)
    return np.where(merged[thread], count, 1).astype(np.int64, copy=False)


def row_slices(rows: np.ndarray, thread: np.ndarray, count: np.ndarray, steps: npt.NDArray[np.float64],
               size: int) -> list[np.ndarray]:
    """`rows` cut into consecutive slices of about `size` instants each (a run is never cut),
    so that expanding them a slice at a time keeps the transients small."""
    per = instants_per_row(thread[rows], count[rows], steps)
    total = int(per.sum())
    if total <= size:
        return [rows] if len(rows) else []
    bounds = np.searchsorted(np.cumsum(per), np.arange(size, total, size))
    return [part for part in np.split(rows, bounds) if len(part)]


def instants(rows: np.ndarray, thread: np.ndarray, t: np.ndarray, count: np.ndarray,
             steps: npt.NDArray[np.float64]) -> Instants:
    """Expands `rows` (indices into the columns `thread`, `t`, `count`) into their instants,
    in row order."""
    rows = np.asarray(rows, dtype=np.int64)
    thread_r = thread[rows]
    per = instants_per_row(thread_r, count[rows], steps)
    total = int(per.sum())
    if total == len(rows):
        return Instants(rows, np.asarray(t[rows], dtype=np.float64))
    at = np.repeat(np.arange(len(rows)), per)
    offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(per) - per, per)
    times = offset * np.nan_to_num(steps[thread_r], nan=0.0)[at]
    times += t[rows][at]
    return Instants(rows[at], times)


@dataclass(frozen=True)
class InstantTicks:
    """The sample instants of some rows as ticks: for each, the row it belongs to and its tick
    (its time over `interval`, rounded half to even)."""

    row: np.ndarray  # int32 when the table's rows fit, else int64
    tick: npt.NDArray[np.int64]
    per_row: np.ndarray  # instants of each of the rows given: np.repeat(value, per_row) lays
    # a per-row value out per instant without a gather


def instant_ticks(rows: np.ndarray, thread: np.ndarray, t: np.ndarray, count: np.ndarray,
                  steps: npt.NDArray[np.float64], interval: float) -> InstantTicks:
    """`instants` of `rows` in ticks, computed as `np.round(instants(...).t / interval)` is,
    operation for operation (the same float results), but with the per-row values repeated
    rather than gathered and one float buffer worked in place: a third of the passes and
    temporaries over millions of instants."""
    rows = np.asarray(rows, dtype=np.int64)
    row_dtype = np.int32 if len(t) < (1 << 31) else np.int64
    thread_r = thread[rows]
    per = instants_per_row(thread_r, count[rows], steps)
    times = np.asarray(t[rows], dtype=np.float64)
    if int(per.sum()) == len(rows):
        return InstantTicks(rows.astype(row_dtype), np.round(times / interval).astype(np.int64), per)
    first = np.cumsum(per)
    first -= per
    # offset within its run (an integer, exact in float64), times the step, plus the first time
    at = np.arange(int(first[-1] + per[-1]), dtype=np.float64)
    at -= np.repeat(first.astype(np.float64), per)
    at *= np.repeat(np.nan_to_num(steps[thread_r], nan=0.0), per)
    at += np.repeat(times, per)
    at /= interval
    np.rint(at, out=at)
    return InstantTicks(np.repeat(rows.astype(row_dtype), per), at.astype(np.int64), per)


def last_instants(thread: np.ndarray, t: np.ndarray, count: np.ndarray,
                  steps: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each row's last instant (a run's first instant plus a step per further sample)."""
    per = instants_per_row(thread, count, steps)
    step = np.nan_to_num(steps, nan=0.0)[thread] if len(steps) else np.zeros(len(thread))
    last: npt.NDArray[np.float64] = t + (per - 1) * step
    return last


def bins_of_rows(thread: np.ndarray, t: np.ndarray, count: np.ndarray, steps: npt.NDArray[np.float64],
                 width: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, bin) for every bin of `width` seconds (of `bins`, the last taking the rest) that
    some instant of the row falls in, in row order and, within a row, in time order. A run
    whose step is at most the width meets every bin from its first instant's to its last's;
    the rows of a run with a longer step are expanded into their instants."""
    def bin_of(x: np.ndarray) -> np.ndarray:
        # (+1e-6 of a bin: an instant k * width computed in floating point lands in bin k)
        found: np.ndarray = np.minimum(np.floor(x / width + 1e-6).astype(np.int64), bins - 1)
        return found

    merged = ~np.isnan(steps)
    if merged.any() and float(np.nanmax(steps)) > width:
        found = instants(np.arange(len(thread)), thread, t, count, steps)
        return found.row, bin_of(found.t)
    first = bin_of(t)
    lengths = bin_of(last_instants(thread, t, count, steps)) - first + 1
    total = int(lengths.sum())
    if total == len(t):
        return np.arange(len(t)), first
    row = np.repeat(np.arange(len(t)), lengths)
    offset = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return row, first[row] + offset
