"""cpu_throttled: the cgroup's CPU quota throttles the process; its threads wait for quota.

What it finds:
    A CPU quota on the process's cgroup (v1 cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max,
    or a parent group's smaller one) that the process ran out of: the share of the window's
    quota periods that were throttled and the time its runqueues sat throttled per second per
    core of quota (cpu.stat, read at the start and end of the window); the score is the weaker
    of the two, so a quota that exists but is never hit scores nothing. Not applicable without
    a quota. When other processes left the process less CPU than its quota (its CPU plus the
    machine's idle cores under the quota), the quota rarely runs out and its counters
    understate it: then its runnable threads per core of quota speak for it too, and the
    finding says the machine's load hid the throttling.

Why it matters:
    A throttled thread is runnable, yet runs on no core until the next period: the service's
    usable cores are its quota, not the machine's. Every request waits out the rest of each
    period once the quota is spent, and os.cpu_count() and BLAS / OpenMP size their pools from
    the machine's cores, not the quota: a pod limited to 0.5 core on a 64-core node starts
    64-thread pools that spend the quota in a few milliseconds and then all wait.

What to do instead:
    Raise the quota (Kubernetes resources.limits.cpu, docker --cpus, cpu.max /
    cpu.cfs_quota_us) to the CPU the work needs, or drop the limit and keep the request. Size
    every thread pool to the quota, rounded up: OMP_NUM_THREADS, OPENBLAS_NUM_THREADS,
    MKL_NUM_THREADS, torch.set_num_threads, the request pool and the worker count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.base import Finding, Lever, LeverKind, NotApplicable, make_finding, pct, ramp
from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements
from diagnose.report.model.findings import Fix

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.os_summary import ProcessOS

ID = "cpu_throttled"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The CPU quota throttles the process"
    what: str = ("Share of the window's cgroup quota periods that ran out of quota, and the time the runqueues sat "
                 "throttled per second per core of quota (cpu.stat); the score is the weaker of the two.")
    advice: tuple[str, ...] = (
        ("A CPU quota caps the cores the service may use, whatever the machine has: size every pool (request "
         "threads, worker processes, intra-op threads) to the quota, rounded up, and re-measure P99 after each "
         "change."),
    )
    # share of the window's quota periods that ran out of quota
    low: float = 0.05
    high: float = 0.5
    # throttled runqueue time per second of window, per core of quota
    cost_low: float = 0.05
    cost_high: float = 0.5
    # runnable threads per core of quota, read only when the machine left less than the quota
    demand_low: float = 1.2
    demand_high: float = 3.0


@dataclass(frozen=True, kw_only=True)
class ThrottleEvidence(Measurements):
    cgroup_cpu_quota_cores: float = key("cgroup CPU quota", U.CORES, none="no quota")
    affinity_cores: int = key("cores in the CPU affinity mask", U.CORES, none=NOT_MEASURED)
    usable_cores: float = shared_key()
    cgroup: str | None = key("cgroup whose quota binds", U.TEXT, none=NOT_MEASURED)
    throttled_period_share: float = key("share of quota periods throttled", U.PERCENT)
    quota_periods: int = key("quota periods with runnable threads", U.NUMBER)
    throttled_periods: int = key("quota periods throttled", U.NUMBER)
    throttled_s: float = key("time runqueues sat throttled, summed over CPUs", U.SECONDS)
    throttled_cores: float = key("cores held throttled, on average", U.CORES)
    cores_in_use: float = key("cores in use", U.CORES, none=NOT_MEASURED)
    machine_idle_cores: float | None = key("cores the machine left idle", U.CORES, none=NOT_MEASURED)
    room_below_quota: bool = key("the machine left it less CPU than its quota", U.FLAG)
    runnable_per_core: float | None = shared_key()
    quota_wanted_cores: float = key("quota that runs the throttled work too", U.CORES)
    pool_threads_for_quota: int = key("threads per pool for the quota (rounded up)", U.THREADS)
    fix: Fix = shared_key()


EVIDENCE = declarations(ThrottleEvidence)


def pool_size(quota: float) -> int:
    """The thread count a pool should have under a quota: the quota rounded up, at least 1."""
    return max(1, math.ceil(quota - 1e-9))


def _room_below_quota(os_: ProcessOS, used: float, quota: float) -> bool:
    """Other processes left it less CPU than its quota: what it ran plus the cores the machine
    left idle stays under the quota (unknown without the machine's idle time)."""
    return os_.machine_idle_cores is not None and used + os_.machine_idle_cores < quota


def _score(share: float, cost: float, runnable_per_quota_core: float, room_below_quota: bool,
           settings: Settings) -> float:
    """The weaker of the throttled share and its cost; where the machine left less than the
    quota, at least what the runnable threads per core of quota say: the cpu_quota fixture
    beside a busy machine ran 0.40 of its 0.5 cores, ran out in 8 of 41 periods for 2% of the
    window, with 3.8 threads runnable."""
    throttled = min(ramp(share, settings.low, settings.high),
                    ramp(cost, settings.cost_low, settings.cost_high))
    if not room_below_quota:
        return throttled
    return max(throttled, ramp(runnable_per_quota_core, settings.demand_low, settings.demand_high))


def _hidden_words(os_: ProcessOS, used: float, quota: float) -> str:
    idle = os_.machine_idle_cores or 0.0
    return (f"; other processes' load left it {used + idle:.2f} cores ({used:.2f} used, "
            f"{idle:.2f} idle on the machine), less than its quota, so the quota ran out in few "
            f"periods: its {os_.mean_runnable:.1f} runnable threads want "
            f"{os_.mean_runnable / quota:.1f}x the quota")


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    """How often the cgroup's CPU quota ran out, and the quota and pool size the throttled work wanted."""
    os_ = analysis.os
    if os_ is None:
        return NotApplicable(ID, "needs OS counters from /proc (`attach`, or `analyze --procfs`)")
    quota = os_.cpu_quota_cores
    if not quota:
        return NotApplicable(ID, "the process has no cgroup CPU quota")
    if os_.throttle_periods is None or os_.throttled_periods is None or os_.throttled_s is None:
        return NotApplicable(ID, "the cgroup's throttling counters (cpu.stat) were not read")
    window = max(os_.window_s, 1e-6)
    share = os_.throttled_share or 0.0
    throttled_cores = os_.throttled_s / window
    cost = throttled_cores / quota
    usable = os_.usable_cores
    used = os_.cpu_s / window
    room_below_quota = _room_below_quota(os_, used, quota)
    score = _score(share, cost, os_.mean_runnable / quota, room_below_quota, settings)
    # The CPU the work wanted: what it ran, plus the time its runqueues sat throttled (each held at
    # least one runnable thread; one counted per CPU however many it held), on no more cores than
    # it may run on and the machine left idle (throttled CPUs are idle ones).
    ceiling = float(os_.cores)
    if os_.machine_idle_cores is not None:
        ceiling = min(ceiling, used + os_.machine_idle_cores)
    demand = max(used, min(used + throttled_cores, float(os_.cores)))  # what the quota should allow
    if room_below_quota:  # the throttled time shows little of it: each runnable thread wants a core
        demand = max(demand, min(os_.mean_runnable, float(os_.cores)))
    wanted = max(used, min(demand, ceiling))
    gain = wanted / used if used > 0 else 1.0
    new_quota: float = min(float(os_.cores), max(quota, math.ceil(demand - 1e-9)))
    if float(new_quota).is_integer():
        new_quota = int(new_quota)
    threads = pool_size(quota)
    evidence = ThrottleEvidence(
        cgroup_cpu_quota_cores=quota, affinity_cores=os_.cores, usable_cores=usable, cgroup=os_.cpu_cgroup,
        throttled_period_share=share, quota_periods=os_.throttle_periods,
        throttled_periods=os_.throttled_periods, throttled_s=os_.throttled_s, throttled_cores=throttled_cores,
        cores_in_use=used, machine_idle_cores=os_.machine_idle_cores, room_below_quota=room_below_quota,
        runnable_per_core=os_.mean_runnable / usable if usable else None, quota_wanted_cores=demand,
        pool_threads_for_quota=threads, fix=Fix("cpu_quota_cores", new_quota))
    where = f" (cgroup {os_.cpu_cgroup.partition(':')[2]})" if os_.cpu_cgroup else ""
    summary = (f"a CPU quota of {quota:g} cores{where} on {os_.cores} cores throttled the process in "
               f"{os_.throttled_periods} of {os_.throttle_periods} periods ({pct(share)}): its "
               f"runqueues sat throttled {os_.throttled_s:.1f} s over the {window:.1f} s window, "
               f"{throttled_cores:.2f} cores' worth while it ran on {used:.2f}; "
               f"{os_.mean_runnable:.1f} runnable threads on {usable:g} usable cores"
               + (_hidden_words(os_, used, quota) if room_below_quota else ""))
    basis = (f"estimate: the process ran {used:.2f} cores and its runqueues sat throttled "
             f"{throttled_cores:.2f} cores' worth (cpu.stat); each throttled runqueue held a "
             f"runnable thread, counted once per CPU however many it held (conservative), so "
             f"without the quota the work could have run on {wanted:.2f} cores (at most the "
             f"{os_.cores} it may run on"
             + (f", {os_.machine_idle_cores:.2f} idle on the machine" if os_.machine_idle_cores
                is not None else "")
             + f"): about {gain:.2f}x, if the throttled work is CPU work")
    advice = [
        f"Raise the CPU quota from {quota:g} to {new_quota:g} cores (Kubernetes "
        f"resources.limits.cpu, docker --cpus, cpu.max or cpu.cfs_quota_us), or drop the limit "
        f"and keep the request: in {pct(share)} of the periods the threads spent the quota and "
        f"waited, runnable, for the next period.",
        f"Size the thread pools to the quota, rounded up, not to the machine: os.cpu_count() and "
        f"BLAS/OpenMP size their pools from the machine's cores ({os_.cores}), not the quota "
        f"({quota:g}). Set OMP_NUM_THREADS={threads}, OPENBLAS_NUM_THREADS={threads}, "
        f"MKL_NUM_THREADS={threads}, torch.set_num_threads({threads}), and the request pool (and "
        f"worker count) to {threads}; today {os_.mean_runnable:.1f} threads are runnable on "
        f"average.",
    ] + list(settings.advice)
    lever = Lever(LeverKind.MORE_CORES, round(max(1.0, gain), 2),
                  f"if the quota were raised to {new_quota:g} cores", basis)
    return make_finding(ID, settings, score, summary, evidence, advice=advice,
                        gain=(max(1.0, gain), basis), levers=[lever],
                        share_samples={"throttled_period_share": os_.throttle_periods})


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 uses=(Input.OS_COUNTERS,))
