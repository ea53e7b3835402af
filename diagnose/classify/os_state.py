"""Thread states the frames cannot decide, settled by the thread's OS state from /proc.

A native leaf no table names (absl's futex through a bare `syscall`, a stripped library's
unnamed wait) reads as "running native code"; a Python-only sample of a thread blocked in C reads
as "running Python" (estimated). The /proc sampler saw the same thread over the same window: when
it was asleep (S / D / I) in nearly every observation and got next to no CPU, those samples were
waits. Samples whose own native frames show the interpreter running Python, and waits the frames
already name, are kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from diagnose.model.kernel_waits import Blocking, KernelView, WaitObject
from diagnose.model.vocab import RUNNING, ThreadState, WaitKind
from diagnose.model.vocab import ResourceKind

if TYPE_CHECKING:  # types only: the OS summary is read here, built elsewhere
    from diagnose.model.os_summary import ProcessOS

SLEEPING = ("S", "D", "I")
MIN_OBSERVATIONS = 5  # fewer /proc observations of a thread decide nothing
ASLEEP_SHARE = 0.9  # of the thread's observations (py-spy's own pauses excluded)
MAX_CORE_SHARE = 0.1  # CPU seconds over the window


def asleep_threads(os_: ProcessOS) -> set[int]:
    """Threads /proc saw asleep nearly always, using next to no CPU."""
    window = max(os_.window_s, 1e-6)
    found = set()
    for tid, thread in os_.threads.items():
        seen = sum(thread.state_counts.values())
        if seen < MIN_OBSERVATIONS:
            continue
        asleep = sum(n for state, n in thread.state_counts.items() if state in SLEEPING)
        if asleep / seen >= ASLEEP_SHARE and thread.cpu_s / window <= MAX_CORE_SHARE:
            found.add(int(tid))
    return found


def settle_with_os_state(samples: pd.DataFrame, os_: ProcessOS | None) -> pd.DataFrame:
    """Busy samples of asleep threads become waits (`io`) where the frames could not tell: an
    unnamed native leaf (state native, no wait kind) or a state estimated from Python frames."""
    if os_ is None or samples.empty:
        return samples
    asleep = asleep_threads(os_)
    if not asleep:
        return samples
    undecided = (((samples["state"] == ThreadState.NATIVE) & (samples["wait_kind"] == WaitKind.NONE))
                 | (samples["state"].isin(RUNNING) & samples["estimated"]))
    mask = samples["tid"].isin(asleep) & undecided
    if not mask.any():
        return samples
    out = samples.copy()
    out.loc[mask, "state"] = ThreadState.IO
    out.loc[mask, "wait_kind"] = WaitKind.IO
    return out


# How far (seconds) a sample may lie from the /proc tick that dates it, beyond half the gap
# between ticks: the two clocks start a few ms apart (readers/chrometrace.py).
KERNEL_MATCH_SLACK_S = 0.02


def settle_with_kernel(samples: pd.DataFrame, kernel: KernelView | None, interval_s: float
                       ) -> pd.DataFrame:
    """Samples the frames read as running, settled by what the kernel saw the thread wait on at
    that instant (model/kernel_waits.py): a lock's futex or a file lock is a lock wait, the
    GIL's futex a GIL wait, a pipe, socket, child or timer a wait outside the thread, a
    listening socket a wait for work. The frames' own measured states are kept; a GIL wait is
    taken from the kernel only where no native sample calibrated the stack (the calibration
    already counts it). Each sample is dated by the nearest /proc tick of its thread."""
    if kernel is None or samples.empty or not kernel.times:
        return samples
    state = samples["state"]
    undecided = ((state.isin(RUNNING) & (samples["state_source"] != "measured"))
                 | ((state == ThreadState.NATIVE) & (samples["wait_kind"] == WaitKind.NONE)))
    if not undecided.any():
        return samples
    estimated = samples["estimated"].to_numpy()
    tids = samples["tid"].to_numpy()
    starts = samples["t"].to_numpy(dtype=np.float64)
    centres = starts + samples["count"].to_numpy() * interval_s / 2
    new_state = samples["state"].astype(object).to_numpy().copy()
    new_kind = samples["wait_kind"].astype(object).to_numpy().copy()
    changed = False
    undecided_rows = undecided.to_numpy()
    for tid, times in kernel.times.items():
        rows = np.flatnonzero((tids == tid) & undecided_rows & np.isfinite(centres))
        if not len(rows) or not len(times):
            continue
        order = np.argsort(times, kind="stable")
        times_sorted = times[order]
        objects = kernel.indices[tid][order]
        gap = float(np.median(np.diff(times_sorted))) if len(times_sorted) > 1 else 0.5
        tolerance = gap / 2 + KERNEL_MATCH_SLACK_S
        at = np.searchsorted(times_sorted, centres[rows])
        before = np.clip(at - 1, 0, len(times_sorted) - 1)
        after = np.clip(at, 0, len(times_sorted) - 1)
        nearer = np.where(np.abs(times_sorted[before] - centres[rows])
                          <= np.abs(times_sorted[after] - centres[rows]), before, after)
        close = np.abs(times_sorted[nearer] - centres[rows]) <= tolerance
        for row, index, ok in zip(rows.tolist(), objects[nearer].tolist(), close.tolist()):
            if not ok:
                continue
            decided = _kernel_state(kernel.objects[index], bool(estimated[row]))
            if decided is not None:
                new_state[row], new_kind[row] = decided
                changed = True
    if not changed:
        return samples
    out = samples.copy()
    out["state"] = pd.Categorical(new_state, dtype=samples["state"].dtype)
    out["wait_kind"] = pd.Categorical(new_kind, dtype=samples["wait_kind"].dtype)
    return out


def _kernel_state(obj: WaitObject, estimated: bool) -> tuple[str, str] | None:
    if obj.blocking == Blocking.RUNNING:
        return None
    if obj.blocking == Blocking.GIL:
        return (ThreadState.GIL.value, WaitKind.GIL.value) if estimated else None
    if obj.blocking == Blocking.HELD:
        kind = WaitKind.FILE_LOCK if obj.resource == ResourceKind.FILE_LOCK else WaitKind.LOCK
        return ThreadState.LOCK.value, kind.value
    if obj.blocking == Blocking.IDLE:
        return ThreadState.IDLE.value, WaitKind.NONE.value
    return ThreadState.IO.value, WaitKind.IO.value
