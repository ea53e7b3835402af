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

import math
from dataclasses import dataclass, replace

from diagnose.collect.activity import ProcessActivity
from diagnose.report.model.run import PlannedProcess

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
# A process whose threads all sleep (a supervisor in its wait) shows the same stack all window:
# it needs only enough samples to be seen, IDLE_SAMPLES_PER_WINDOW expected in the window
# (py-spy draws the gap before each sample, its first included, from an exponential
# distribution of mean 1/rate: at 1 Hz a 3 s window missed an idle parent about once in a
# hundred attaches, P = e^-(rate x window)). Each sample still costs py-spy ~1.3 ms on a
# saturated 2-core box (a one-thread supervisor at 8 Hz for 6 s: 0.078 CPU s, 0.025 of it its
# start-up), so an idle process gets the least rate that takes them before its stop lead
# (stop_lead_s: a low-rate recorder is told to stop early enough to exit by the window's end):
# 3 Hz over 6 s, where a fixed 10 Hz cost 7 more samples a second for nothing.
IDLE_PROCESS_RATE_HZ = 3  # the least (at 2 Hz, 2 % of exits would come > 1 s after the window)
IDLE_SAMPLES_PER_WINDOW = 10
# A tree whose busy processes want more cores than the machine has (measured before the window:
# run + run-queue time, schedstat) takes every observer CPU-second out of its own work: a single
# Python process usually leaves a core idle (the GIL), forked workers do not. There the budgets
# of the Python recorders and of the /proc sampler are halved: ~1,000 thread-samples over a 10 s
# window still score the shares, and the observer's CPU stays near what it costs one process.
SATURATED_BUDGET_SHARE = 0.5
# A blocking native sample stops every thread of the process, and a thread waiting in the run
# queue stops only once the scheduler gives it a core: on the scheduler_overhead fixture (64 busy
# threads, 23 runnable per core) each native sample took 57 ms, the service stopped 23% of the
# window at 4 Hz. A process whose own busy threads would keep it stopped more than
# MAX_NATIVE_PAUSE_SHARE of the window at the native rate is not calibrated natively: its states
# come from its non-blocking samples and /proc, and a run queue that long is its problem, which
# /proc measures. Its own busy threads, not its run-queue time: other tenants lengthen that, and
# on a loaded CI machine 16 threads behind one sqlite connection lost the calibration that tells
# their GIL waits from running (5%: cpu_bound scored 100 beside the GIL's verdict). 15% keeps it
# up to ~15 busy threads per core at 4 Hz.
STOP_PER_QUEUED_THREAD_S = 0.0025
MAX_NATIVE_PAUSE_SHARE = 0.15
# The /proc sampler reads one small file per thread per tick; its budget is similar.
PROC_READS_PER_SECOND = 300
MIN_PROC_INTERVAL_S = 0.1
MAX_PROC_INTERVAL_S = 0.5


# py-spy stops on SIGINT only once a sample arrives after it: measured, the wait is close to two of
# its exponential sampling gaps (30 stops at 5 Hz: median 0.39 s, 2 over 1 s; 12 at 2 Hz: median
# 0.72 s, up to 1.75 s; on a saturated tree of 4 processes, 36 stops at 8 Hz: median 0.24 s, up
# to 0.95 s, and 12 at 3 Hz: median 0.59 s, up to 1.27 s), a Gamma(2, rate), whose tail
# P(wait > x / rate) = e^-x (1 + x) is 1% at x = STOP_MISS_LOG. So each recorder is told to stop
# STOP_MISS_LOG / rate - STOP_SLACK_S before the window's end (collect/capture.py): 99 times in 100
# it has exited STOP_SLACK_S after the end. A tree has five recorders or more, and the verdict
# must follow within a second of the window (a start-up of 0.5-0.65 s and an analysis of ~0.3 s
# leave little): at 5% a recorder (the earlier x = 4.74, slack 0.15 s), 3 attaches in 12 of a
# saturated tree returned more than 1 s after a 5 s window. 0.02 s for a recorder at 100 Hz;
# 1.6 s for a native calibration at 4 Hz.
STOP_MISS_LOG = 6.64
STOP_SLACK_S = 0.05
STOP_LEAD_MAX_SHARE = 0.25  # of the window: a slow recorder keeps most of its span
MAX_STOP_RAISE = 4  # a rate is never raised more than this many times to make up for its lead
STOP_COUNT_KEPT = 0.97  # a lead that costs less of the samples than this leaves the rate alone
# How a plan's reason says it calibrates natively (without_native takes it out again).
NATIVE_REASON = ", plus native stacks"


def stop_lead_s(rate_hz: int, duration: float) -> float:
    """How long before the window's end a recorder at `rate_hz` is told to stop, so that it exits
    about then (STOP_MISS_LOG)."""
    lead = STOP_MISS_LOG / max(rate_hz, 1) - STOP_SLACK_S
    return max(0.0, min(lead, STOP_LEAD_MAX_SHARE * duration))


def samples_before_lead(rate_hz: int, duration_s: float) -> float:
    """The samples a recorder at `rate_hz` is expected to take in a window of `duration_s` before
    it is told to stop (stop_lead_s)."""
    return rate_hz * (duration_s - stop_lead_s(rate_hz, duration_s))


def uncut_rate(duration_s: float) -> int:
    """The least rate whose stop lead (stop_lead_s) STOP_LEAD_MAX_SHARE of a window of
    `duration_s` does not cut."""
    return math.ceil(STOP_MISS_LOG / (STOP_LEAD_MAX_SHARE * duration_s + STOP_SLACK_S))


def stoppable_rate(rate_hz: int, duration_s: float | None) -> int:
    """The least rate at which a recorder stopped its lead early (stop_lead_s) still takes the
    `rate_hz` x `duration_s` samples the budget gives it (STOP_COUNT_KEPT of them): the same
    count, so the same cost (py-spy pays per sample), over a span a little shorter; and at which
    that lead is not cut by STOP_LEAD_MAX_SHARE, so the recorder still exits by the window's end
    (a 3 Hz recorder needs a 2.2 s lead: a 10 s window allows it, a 5 s one raises it to 6 Hz)."""
    if not duration_s or duration_s <= 0 or rate_hz <= 0:
        return rate_hz
    wanted = rate_hz * duration_s
    for rate in range(max(rate_hz, min(uncut_rate(duration_s), MAX_STOP_RAISE * rate_hz)),
                      MAX_STOP_RAISE * rate_hz + 1):
        if samples_before_lead(rate, duration_s) >= STOP_COUNT_KEPT * wanted:
            return rate
    return MAX_STOP_RAISE * rate_hz


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
    proc_interval = _proc_interval(threads, processes)
    if requested_rate:
        return SamplingPlan(requested_rate, proc_interval, False,
                            f"full fidelity: every sample blocking{' with native frames' if native else ''} "
                            f"at {requested_rate} Hz (--rate)")
    rate = _rate(threads, processes)
    native_rate = _native_rate(threads, processes) if native else 0
    reason = (f"gentle: non-blocking Python stacks at {rate} Hz ({THREAD_SAMPLES_PER_SECOND} "
              f"thread-samples/s over {threads} threads"
              + (f", {PROCESS_SAMPLES_PER_SECOND} process-samples/s over {processes} processes"
                 if processes > 1 else "") + ")")
    if native_rate:
        reason += f"{NATIVE_REASON} at {native_rate} Hz to calibrate thread states"
    return SamplingPlan(rate, proc_interval, True, reason, nonblocking=True, native_rate_hz=native_rate)


@dataclass(frozen=True)
class TreePlan:
    """The sampling plan of every process of the target, shared by what their threads do."""

    sampling: SamplingPlan  # rate_hz: the busy processes' rate (the analysis grid)
    processes: tuple[PlannedProcess, ...]

    def of(self, pid: int) -> PlannedProcess:
        """The plan of `pid`; a process born mid-window gets the busy rate, no calibration."""
        return next((p for p in self.processes if p.pid == pid),
                    PlannedProcess(pid, self.sampling.rate_hz, 0, True))


def without_native(plan: TreePlan) -> TreePlan:
    """The same plan with no native calibration (py-spy could not unwind the target natively)."""
    sampling = replace(plan.sampling, native_rate_hz=0,
                       reason=plan.sampling.reason.split(NATIVE_REASON, 1)[0])
    return TreePlan(sampling, tuple(replace(p, native_rate_hz=0) for p in plan.processes))


def saturates(busy: list[ProcessActivity], cores: int | None) -> bool:
    """True when more than one busy process and, between them, they want every core."""
    demand = [a.demand_cores for a in busy if a.demand_cores == a.demand_cores]
    return bool(cores) and len(busy) > 1 and bool(demand) and sum(demand) >= (cores or 0)


def native_pause_share(activity: ProcessActivity, cores: int | None, rate_hz: int) -> float | None:
    """The share of the window a native recorder at `rate_hz` would keep the process stopped: its
    busy threads per core times STOP_PER_QUEUED_THREAD_S per sample; None without the cores."""
    if not cores:
        return None
    return rate_hz * STOP_PER_QUEUED_THREAD_S * max(1.0, activity.busy_threads / cores)


def idle_rate_hz(duration_s: float | None) -> int:
    """An idle process's rate: the least from IDLE_PROCESS_RATE_HZ up whose stop lead is uncut
    (uncut_rate) and that expects IDLE_SAMPLES_PER_WINDOW samples before that lead (stop_lead_s)
    in a window of `duration_s`."""
    if not duration_s or duration_s <= 0:
        return IDLE_PROCESS_RATE_HZ
    rate = max(IDLE_PROCESS_RATE_HZ, min(uncut_rate(duration_s), MAX_STOP_RAISE * IDLE_PROCESS_RATE_HZ))
    while rate < MAX_RATE_HZ and samples_before_lead(rate, duration_s) < IDLE_SAMPLES_PER_WINDOW:
        rate += 1
    return rate


def plan_tree(activity: list[ProcessActivity], requested_rate: int | None,
              native: bool = True, cores: int | None = None,
              duration_s: float | None = None) -> TreePlan:
    """The gentle plan over a process tree, shared by activity. Each process's threads cost
    py-spy the same per sample whatever they do, but only busy ones need the rate: a supervisor
    asleep in a wait shows one stack all window. So the thread-sample budget is divided over the
    threads of busy processes, and idle processes get the least rate that still sees them
    (idle_rate_hz: IDLE_SAMPLES_PER_WINDOW samples in a window of `duration_s`). Native calibration
    (classify/calibrate.py) is keyed by Python stack and shared by the whole tree: processes
    running the same program run the same stacks, so one busy process per program is unwound
    natively, at the native rate the others would have had between them. py-spy's cost of a
    native recorder is mostly per process (loading every library's symbols), so this cuts it
    by the number of alike workers. Nothing busy (an idle service): every process counts.
    Busy processes that want all `cores` between them get SATURATED_BUDGET_SHARE of the budgets
    (py-spy's Python recorders' and the /proc sampler's; not the native calibration's)."""
    threads = sum(a.threads for a in activity) or None
    base = plan_sampling(threads, requested_rate, native, max(1, len(activity)))
    if requested_rate or not activity:
        return TreePlan(base, tuple(PlannedProcess(a.pid, base.rate_hz, 0, a.busy) for a in activity))
    busy = [a for a in activity if a.busy] or list(activity)
    busy_threads = max(1, sum(a.threads for a in busy))
    share = SATURATED_BUDGET_SHARE if saturates(busy, cores) else 1.0
    rate = stoppable_rate(_rate(busy_threads, len(busy), share), duration_s)
    idle_rate = min(rate, idle_rate_hz(duration_s))  # already allows for its stop lead
    calibrated: dict[tuple[str, ...], ProcessActivity] = {}
    for a in sorted(busy, key=lambda a: -(a.cpu_cores if a.cpu_cores == a.cpu_cores else 0.0)):
        calibrated.setdefault(a.program, a)
    # Not halved: the native recorder's cost is mostly fixed (loading every library's symbols:
    # 0.18-0.22 CPU s at 1 Hz, 0.25 at 3 Hz over 8 s on one worker), while the GIL and lock
    # shares rest on its samples (classify/calibrate.py needs MIN_SUPPORT per stack).
    native_rate = (stoppable_rate(_native_rate(sum(a.threads for a in calibrated.values()),
                                               len(busy)), duration_s) if native else 0)
    pauses = {a.pid: native_pause_share(a, cores, native_rate) for a in calibrated.values()}
    too_costly = {pid: paused for pid, paused in pauses.items()
                  if native_rate and paused is not None and paused > MAX_NATIVE_PAUSE_SHARE}
    chosen = {a.pid for a in calibrated.values()} - set(too_costly)
    if not chosen:
        native_rate = 0
    busy_pids = {a.pid for a in busy}
    processes = tuple(PlannedProcess(a.pid, rate if a.pid in busy_pids else idle_rate,
                                  native_rate if a.pid in chosen else 0, a.pid in busy_pids)
                      for a in activity)
    idle = len(activity) - len(busy)
    reason = (f"gentle: non-blocking Python stacks at {rate} Hz in {len(busy)} busy "
              f"process{'es' if len(busy) > 1 else ''} ({THREAD_SAMPLES_PER_SECOND * share:g} "
              f"thread-samples/s over their {busy_threads} threads"
              + (f", {PROCESS_SAMPLES_PER_SECOND * share:g} process-samples/s over {len(busy)} "
                 f"processes" if len(busy) > 1 else "") + ")"
              + (" (Python and /proc budgets halved: the busy processes want every core)"
                 if share < 1 else "")
              + (f", {idle_rate} Hz in {idle} idle one{'s' if idle > 1 else ''}" if idle else ""))
    if native_rate:
        reason += (f"{NATIVE_REASON} at {native_rate} Hz in {len(chosen)} of them to "
                   f"calibrate thread states (one per program)")
    if too_costly:
        worst = max(too_costly.values())
        reason += (f"; no native calibration in {len(too_costly)} process{'es' if len(too_costly) > 1 else ''} "
                   f"whose run queue would keep {'them' if len(too_costly) > 1 else 'it'} stopped ~{worst:.0%} "
                   f"of the window")
    # the /proc sampler's reads come out of the service too: the same share of its budget
    proc_interval = _proc_interval(threads or 1, len(activity), share)
    sampling = SamplingPlan(rate, proc_interval, True, reason, nonblocking=True,
                            native_rate_hz=native_rate)
    return TreePlan(sampling, processes)


def _proc_interval(threads: int, processes: int, share: float = 1.0) -> float:
    # /proc reads per tick: one per thread plus a few per process (task list, statm)
    return min(MAX_PROC_INTERVAL_S, max(MIN_PROC_INTERVAL_S,
                                        (threads + 3 * processes) / (share * PROC_READS_PER_SECOND)))


def _rate(threads: int, processes: int, share: float = 1.0) -> int:
    return max(MIN_RATE_HZ, min(MAX_RATE_HZ, round(share * THREAD_SAMPLES_PER_SECOND / threads),
                                round(share * PROCESS_SAMPLES_PER_SECOND / processes)))


def _native_rate(threads: int, processes: int) -> int:
    return max(MIN_NATIVE_RATE_HZ, min(round(NATIVE_THREAD_SAMPLES_PER_SECOND / max(1, threads)),
                                       round(NATIVE_PROCESS_SAMPLES_PER_SECOND / max(1, processes))))
