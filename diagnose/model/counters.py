"""The OS counters against the samples: /proc CPU time is the arbiter of "was it running".

A sample says a thread ran when its stack looks busy; /proc says how much CPU the thread got and
how long it sat runnable in the run queue (schedstat): together, the time it wanted a core. A
sample cannot tell running from runnable, so the counters' figure is the two summed.
They disagree when a wait looks like work: a native library's wait whose frames do not show it
(a completion queue behind an unnamed `syscall`), a Python-only sample estimated busy. A check
that says the limit is CPU (cpu_bound, compute_bound, gil_contention) needs that CPU to have been
used. Where the threads used far less CPU than the samples imply, the counters win: the check's
score is scaled by measured / sampled and the finding says so with both figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from diagnose.model.os_summary import ProcessOS, ProcThread
from diagnose.model.sampled import SampledProcess
from diagnose.vocab import RUNNING

AGREE_RATIO = 0.5  # measured at least this share of what the samples imply: they agree (py-spy's
# pauses take CPU from the target, so the counters read low by a margin)
MIN_GAP_CORES = 0.15  # a smaller difference is sampling noise, whatever the ratio


@dataclass(frozen=True)
class CpuAgreement:
    what: str  # whose CPU, in words ("request threads running")
    sampled_cores: float  # cores the samples imply: each thread's running share, summed
    measured_cores: float | None  # the same threads' CPU + run-queue seconds from /proc over the
    # window: the cores they ran on or waited for

    @property
    def sampled(self) -> float:
        return round(self.sampled_cores, 4)

    @property
    def measured(self) -> float | None:
        return None if self.measured_cores is None else round(self.measured_cores, 4)

    @property
    def agrees(self) -> bool:
        if self.measured_cores is None:
            return True
        gap = self.sampled_cores - self.measured_cores
        return gap < MIN_GAP_CORES or self.measured_cores >= AGREE_RATIO * self.sampled_cores

    @property
    def factor(self) -> float:
        """What a CPU finding's score keeps: 1 where the counters agree, else measured/sampled."""
        if self.measured_cores is None or self.agrees or not self.sampled_cores:
            return 1.0
        return max(0.0, self.measured_cores / self.sampled_cores)

    def note(self) -> str:
        if self.agrees:
            return ""
        return (f"the OS counters overrule the samples: the samples imply {self.sampled_cores:.2f} "
                f"cores of {self.what}, /proc measured {self.measured_cores:.2f} cores running "
                f"or waiting for a core (the rest was waiting for something else)")


def unpaused_window_s(os_: ProcessOS) -> float:
    """The window less the share py-spy held the process stopped: time it could not run."""
    return max(os_.window_s * (1.0 - os_.observer_stop_share), 1e-6)


def wanted_cores(os_: ProcessOS | None) -> float | None:
    """The cores the process ran or sat runnable waiting for (CPU and run-queue seconds over the
    unpaused window): what a thread that computes takes, whether or not a core was free for it.
    None without counters."""
    if os_ is None or os_.window_s <= 0:
        return None
    return (os_.cpu_s + (os_.runqueue_wait_s or 0.0)) / unpaused_window_s(os_)


def running_agreement(analysis: SampledProcess, samples: pd.DataFrame, what: str = "request threads running"
                      ) -> CpuAgreement:
    """The cores `samples`' threads ran by their samples (running share per thread, summed)
    against their CPU seconds in /proc. Threads whose counters /proc never read twice (they came
    and went between refreshes) are left out of both."""
    total, running = _sums_by_tid(samples)
    shares = (running.reindex(total.index, fill_value=0) / total.where(total > 0, 1))
    os_ = analysis.os
    if os_ is None:
        return CpuAgreement(what, float(shares.sum()), None)
    known = [int(t) for t in shares.index if os_.counted(int(t))]
    if not known:
        return CpuAgreement(what, float(shares.sum()), None)
    sampled = float(shares.loc[known].sum())
    measured = sum(_wanted_core_s(os_.threads[t]) for t in known) / unpaused_window_s(os_)
    return CpuAgreement(what, sampled, measured)


def _sums_by_tid(samples: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Samples per OS thread id, all and running only (as `groupby("tid")` sums would give:
    sorted by tid, a tid only where it has rows): count tables over the small thread index,
    then the few threads summed per tid, not a filtered copy of the samples."""
    thread = samples["thread"].to_numpy(dtype=np.int64)
    if not len(thread):
        empty = pd.Series([], dtype=np.int64, index=pd.Index([], dtype=np.int64, name="tid"))
        return empty, empty
    counts = samples["count"].to_numpy(dtype=np.int64)
    state = samples["state"]
    running = state.cat.codes.isin([state.cat.categories.get_loc(s) for s in RUNNING
                                    if s in state.cat.categories]).to_numpy()
    n = int(thread.max()) + 1
    tid_of = np.zeros(n, dtype=np.int64)
    tid_of[thread] = samples["tid"].to_numpy(dtype=np.int64)
    rows = np.bincount(thread, minlength=n)
    total = np.bincount(thread, weights=counts, minlength=n).astype(np.int64)
    ran_rows = np.bincount(thread[running], minlength=n)
    ran = np.bincount(thread[running], weights=counts[running], minlength=n).astype(np.int64)
    by_tid = pd.DataFrame({"tid": tid_of, "total": total, "ran": ran, "rows": rows, "ran_rows": ran_rows})
    summed = by_tid[by_tid["rows"] > 0].groupby("tid")[["total", "ran", "ran_rows"]].sum()
    return summed["total"], summed.loc[summed["ran_rows"] > 0, "ran"]


def _wanted_core_s(thread: ProcThread) -> float:
    return thread.cpu_s + (thread.runqueue_wait_s or 0.0)


def holder_agreement(analysis: SampledProcess, wait_share: float, what: str = "a GIL holder running"
                     ) -> CpuAgreement:
    """A contended GIL is held, and its holder runs, while the waiters wait: the process ran (or
    waited for a core) at least about `wait_share` of a core (the share of request time some
    thread waited). Against the process's CPU and run-queue seconds in /proc."""
    os_ = analysis.os
    measured = None if os_ is None else (os_.cpu_s + (os_.runqueue_wait_s or 0.0)) / unpaused_window_s(os_)
    return CpuAgreement(what, float(wait_share), measured)
