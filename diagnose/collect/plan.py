"""The sampling plan: how often to sample so that observing costs the target little.

py-spy's blocking mode stops every thread of the target while it reads every thread's stack
(with native frames, an unwind per thread). The time the target is stopped per second grows
with rate x threads, and so does py-spy's own CPU, which competes with the target on a small
box. So the default plan spends a fixed budget of thread-samples per second, whatever the
thread count: a 10-thread service is sampled at 20 Hz, a 64-thread one at 3 Hz. Over a 10 s
window that still yields ~2,000 thread-samples, enough for the shares the checks score.
`--rate` asks for a fixed rate instead (e.g. 100 for full fidelity).
"""

from __future__ import annotations

from dataclasses import dataclass

THREAD_SAMPLES_PER_SECOND = 200
MIN_RATE_HZ = 2
MAX_RATE_HZ = 100
# The /proc sampler reads one small file per thread per tick; its budget is similar.
PROC_READS_PER_SECOND = 300
MIN_PROC_INTERVAL_S = 0.1
MAX_PROC_INTERVAL_S = 0.5


@dataclass(frozen=True)
class SamplingPlan:
    rate_hz: int
    proc_interval_s: float
    adaptive: bool  # chosen from the thread count rather than asked for
    reason: str


def plan_sampling(threads: int | None, requested_rate: int | None) -> SamplingPlan:
    threads = max(1, threads or 1)
    proc_interval = min(MAX_PROC_INTERVAL_S, max(MIN_PROC_INTERVAL_S, threads / PROC_READS_PER_SECOND))
    if requested_rate:
        return SamplingPlan(requested_rate, proc_interval, False, f"fixed rate {requested_rate} Hz (--rate)")
    rate = max(MIN_RATE_HZ, min(MAX_RATE_HZ, round(THREAD_SAMPLES_PER_SECOND / threads)))
    return SamplingPlan(rate, proc_interval, True,
                        f"{rate} Hz: a budget of {THREAD_SAMPLES_PER_SECOND} thread-samples/s "
                        f"over {threads} threads keeps the target's pauses small")
