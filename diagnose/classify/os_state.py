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

import pandas as pd

from diagnose.model.vocab import RUNNING, ThreadState, WaitKind

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
