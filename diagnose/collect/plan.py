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
# py-spy pays a fixed cost per process per sampling instant (finding the interpreter, listing
# its threads) beside the per-thread cost: a pre-fork fleet of one-thread workers would otherwise
# get the full per-thread rate in every process. The budget is shared across processes.
PROCESS_SAMPLES_PER_SECOND = 40
NATIVE_PROCESS_SAMPLES_PER_SECOND = 8
# Native frames (needed to tell a lock wait from a GIL wait from running C code) cost far more:
# py-spy must stop the target and unwind every thread. The default plan takes them sparsely, in
# a second blocking recorder, and uses them to calibrate the states of the non-blocking
# Python-only samples (see classify/calibrate.py).
NATIVE_THREAD_SAMPLES_PER_SECOND = 20
MIN_NATIVE_RATE_HZ = 1
MIN_RATE_HZ = 2
MAX_RATE_HZ = 100
# The /proc sampler reads one small file per thread per tick; its budget is similar.
PROC_READS_PER_SECOND = 300
MIN_PROC_INTERVAL_S = 0.1
MAX_PROC_INTERVAL_S = 0.5


@dataclass(frozen=True)
class SamplingPlan:
    rate_hz: int  # the main recorder
    proc_interval_s: float
    adaptive: bool  # chosen from the thread count rather than asked for
    reason: str
    nonblocking: bool = False  # main recorder: Python stacks without stopping the target
    native_rate_hz: int = 0  # sparse blocking native recorder; 0 = none


def plan_sampling(threads: int | None, requested_rate: int | None, native: bool = True,
                  processes: int = 1) -> SamplingPlan:
    """The default (gentle) plan: non-blocking Python stacks at ~200 thread-samples/s, plus
    native stacks at ~20 thread-samples/s when native unwinding works. A requested rate means
    full fidelity: one blocking recorder, native frames on every sample."""
    threads = max(1, threads or 1)
    processes = max(1, processes)
    # /proc reads per tick: one per thread plus a few per process (task list, statm)
    proc_interval = min(MAX_PROC_INTERVAL_S, max(MIN_PROC_INTERVAL_S,
                                                 (threads + 3 * processes) / PROC_READS_PER_SECOND))
    if requested_rate:
        return SamplingPlan(requested_rate, proc_interval, False,
                            f"full fidelity: every sample blocking{' with native frames' if native else ''} "
                            f"at {requested_rate} Hz (--rate)")
    rate = max(MIN_RATE_HZ, min(MAX_RATE_HZ, round(THREAD_SAMPLES_PER_SECOND / threads),
                                round(PROCESS_SAMPLES_PER_SECOND / processes)))
    native_rate = (max(MIN_NATIVE_RATE_HZ, min(round(NATIVE_THREAD_SAMPLES_PER_SECOND / threads),
                                               round(NATIVE_PROCESS_SAMPLES_PER_SECOND / processes)))
                   if native else 0)
    reason = (f"gentle: non-blocking Python stacks at {rate} Hz ({THREAD_SAMPLES_PER_SECOND} "
              f"thread-samples/s over {threads} threads"
              + (f", {PROCESS_SAMPLES_PER_SECOND} process-samples/s over {processes} processes"
                 if processes > 1 else "") + ")")
    if native_rate:
        reason += f", plus native stacks at {native_rate} Hz to calibrate thread states"
    return SamplingPlan(rate, proc_interval, True, reason, nonblocking=True, native_rate_hz=native_rate)
