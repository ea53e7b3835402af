"""Turns the /proc sampler's record into per-thread and process-level numbers for the checks."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypedDict, TypeVar

import numpy as np

from diagnose.collect.procfs import ProcessTimes, ProcRecord
from diagnose.report.model import ThreadOs

# `t` (tracing stop) is py-spy pausing the thread to read it: the observer, never the bottleneck.
OBSERVER_STATES = {"t", "T"}

_Counter = TypeVar("_Counter", int, float)


class _Throttle(TypedDict, total=False):
    """ProcessOS's throttling fields, when measured."""

    throttle_periods: int
    throttled_periods: int
    throttled_s: float
    cpu_cgroup: str | None


@dataclass(frozen=True)
class StateTick:
    """One /proc observation of a thread: when (seconds on the /proc sampler's clock, which
    starts just before py-spy's) and its state letter."""

    t_s: float
    state: str


@dataclass(frozen=True, kw_only=True)
class ProcThread(ThreadOs):
    """A thread as the /proc sampler saw it over the window: the counters the report states
    (ThreadOs, `rounded()` for the report) and what the analysis reads beside them."""

    tid: int
    comm: str = ""
    cpu_s: float = 0.0  # always measured here (absent only in a report's hand-made thread)
    observer_stops: int = 0
    # OS state letter -> observations, observer stops excluded
    state_counts: dict[str, int] = field(default_factory=dict)
    # The same observations one by one, in time order (what dates a state: model/deadlock.py
    # asks whether a thread ran after it began to block); observer stops excluded.
    ticks: tuple[StateTick, ...] = ()
    # False: the sampler saw the thread's state but never read its counters twice (it came and
    # went between two refreshes): its CPU is in the process's counter, not in cpu_s.
    counted: bool = True

    def rounded(self) -> ThreadOs:
        """As the report states it: a thread never counted has no CPU figure, not 0."""
        shown = super().rounded()
        return shown if self.counted else replace(shown, cpu_s=None)


@dataclass(frozen=True)
class RssSteps:
    """How resident memory moved from one /proc tick to the next over the window. A straight
    line in wall-clock time is what a backlog draws while its process runs steadily; on a loaded
    machine the process gets a core in bursts and the same backlog rises in steps between flat
    stretches, which a line fits loosely. Steps that never fall, spread over many rises, are
    still a queue filling up; allocator churn falls about as often as it rises, and a one-off
    allocation is one rise."""

    fall_fraction: float  # of the memory's movement (rises + falls), the share that fell: 0 never fell
    largest_rise_fraction: float  # the largest single rise over the net growth: 1 (or more) is one step


@dataclass(frozen=True)
class CollectorState:
    """The garbage collector's state read from the process's memory over the window
    (collect/gc_state.py): the share of the polled time a collection was in progress, over how
    many polls, and the collections of each generation (young, middle, full); or why it could
    not be read."""

    polls: int
    collecting_share: float | None  # of the polled time
    polled_s: float
    collections: tuple[int, int, int] | None
    unreadable: str | None = None


@dataclass(frozen=True)
class ProcessOS:
    window_s: float
    cores: int
    cpu_quota_cores: float | None
    threads_max: int
    # The process's CPU over the window: its threads' counters summed, or its own counter
    # (/proc/PID/stat) where that is larger: a thread that lived between two ticks (a thread per
    # request) is in no thread's counter but in the process's.
    cpu_s: float
    cpu_utilization: float  # share of the usable cores kept busy by the target
    runqueue_wait_s: float | None
    runqueue_ratio: float | None  # run-queue wait per second of CPU: "runnable but no core"
    mean_runnable: float  # threads in state R per sampler tick, observer stops excluded
    involuntary_ctx_per_s: float | None
    voluntary_ctx_per_s: float | None
    observer_stop_share: float  # share of thread observations that were py-spy pauses
    rss_start: int | None
    rss_end: int | None
    rss_slope_bytes_per_s: float | None
    rss_fit_r2: float | None
    threads: dict[int, ProcThread] = field(default_factory=dict)  # by tid
    write_syscalls: int | None = None  # over the window, whole process (/proc/pid/io syscw)
    machine_idle_cores: float | None = None  # cores the whole machine left idle, on average
    # The cgroup's CPU throttling over the window (collect/cgroup.py): periods with runnable
    # threads, periods that ran out of quota, and the seconds its runqueues sat throttled
    # (summed over CPUs). None without a quota or its counters.
    throttle_periods: int | None = None
    throttled_periods: int | None = None
    throttled_s: float | None = None
    cpu_cgroup: str | None = None  # the group whose quota binds ("v1:/name")
    rss_steps: RssSteps | None = None  # one process's resident memory, tick to tick
    # The process's own CPU over the window by its /proc/PID/stat (every thread it had, exited
    # ones too), in user mode and in the kernel, and the CPU of the children it reaped meanwhile
    # (cutime + cstime). None in older recordings.
    process_user_s: float | None = None
    process_system_s: float | None = None
    reaped_children_s: float | None = None
    collector: CollectorState | None = None  # None where the reader did not run
    # Over the window, every thread the process had: its minor page faults (/proc/PID/stat
    # minflt) and its read- and write-family system calls (/proc/PID/io syscr + syscw). None in
    # older recordings.
    minor_faults: int | None = None
    io_syscalls: int | None = None
    # The bytes its read-family calls took in (/proc/PID/io rchar: files and pipes, not sockets'
    # recv) and those calls (syscr), over the window. None in older recordings.
    read_bytes: int | None = None
    read_calls: int | None = None
    # Of those bytes, the ones fetched from storage (/proc/PID/io read_bytes): the rest the page
    # cache (or a pipe) served. None in older recordings.
    storage_read_bytes: int | None = None
    # The CPU of the threads the sampler read a counter of (their run-queue wait's population,
    # where it is most of the process's: runqueue_ratio); None: the same as cpu_s.
    seen_threads_cpu_s: float | None = None

    @property
    def runqueue_ratio_floor(self) -> bool:
        """The run-queue ratio is a floor: the counted threads ran under half the process's CPU
        (runqueue_ratio), their wait taken per the process's."""
        return self.cpu_s > 0 and not _representative(self.threads_cpu_s, self.cpu_s)

    @property
    def threads_cpu_s(self) -> float:
        """The CPU of the threads whose counters were read: what their run-queue wait is per."""
        return self.cpu_s if self.seen_threads_cpu_s is None else self.seen_threads_cpu_s

    def counted(self, tid: int) -> bool:
        """The thread's counters were read twice: its CPU is in cpu_s's threads, not only in the
        process's counter (a thread that came and went between refreshes is not)."""
        thread = self.threads.get(tid)
        return thread is not None and thread.counted

    @property
    def minor_faults_per_s(self) -> float | None:
        return self.minor_faults / self.window_s if self.minor_faults is not None and self.window_s else None

    @property
    def io_calls_per_s(self) -> float | None:
        return self.io_syscalls / self.window_s if self.io_syscalls is not None and self.window_s else None

    @property
    def read_bytes_per_s(self) -> float | None:
        return self.read_bytes / self.window_s if self.read_bytes is not None and self.window_s else None

    @property
    def bytes_per_read(self) -> float | None:
        """The mean bytes a read-family call took in; None unknown or with no call."""
        return self.read_bytes / self.read_calls if self.read_bytes is not None and self.read_calls else None

    @property
    def usable_cores(self) -> float:
        return min(self.cores, self.cpu_quota_cores) if self.cpu_quota_cores else float(self.cores)

    @property
    def throttled_share(self) -> float | None:
        """The share of the window's quota periods that ran out of quota."""
        if self.throttle_periods is None or self.throttled_periods is None:
            return None
        return self.throttled_periods / self.throttle_periods if self.throttle_periods else 0.0


def _delta(a: _Counter | None, b: _Counter | None) -> _Counter | None:
    return None if a is None or b is None else max(b - a, 0)


@dataclass(frozen=True)
class _StateTally:
    """The /proc sampler's state observations, counted: per thread its state letters, the times
    the observer had it stopped and its own observations in order; per instant the threads
    seen and those running; and how many observations there were, and of the observer."""

    states: dict[int, dict[str, int]]
    stops: dict[int, int]
    ticks: dict[int, list[StateTick]]
    running: dict[float, int]  # instants of an observation not the observer's
    threads_seen: dict[float, int]  # every instant, the observer's stops included
    observer: int
    total: int


def _tally_states(record: ProcRecord) -> _StateTally:
    """The record's state observations counted per thread and per instant (_StateTally)."""
    states: dict[int, dict[str, int]] = {}
    stops: dict[int, int] = {}
    ticks: dict[int, list[StateTick]] = {}
    running: dict[float, int] = {}
    threads_seen: dict[float, int] = {}
    observer = 0
    for t, tid, state in record.state_samples:
        threads_seen[t] = threads_seen.get(t, 0) + 1
        if state in OBSERVER_STATES:
            observer += 1
            states.setdefault(tid, {})
            stops[tid] = stops.get(tid, 0) + 1
            continue
        counts = states.setdefault(tid, {})
        counts[state] = counts.get(state, 0) + 1
        ticks.setdefault(tid, []).append(StateTick(float(t), state))
        running.setdefault(t, 0)
        if state == "R":
            running[t] += 1
    return _StateTally(states, stops, ticks, running, threads_seen, observer, len(record.state_samples))


def _rss_trend(samples: list[tuple[float, int]]) -> tuple[float | None, float | None]:
    """The RSS's least-squares slope (bytes per second) and the line's R²: None for both with
    fewer than 5 samples or none apart in time."""
    if len(samples) < 5:
        return None, None
    ts = np.array([s[0] for s in samples])
    rss = np.array([s[1] for s in samples], dtype=float)
    if not np.ptp(ts) > 0:
        return None, None
    slope, intercept = np.polyfit(ts, rss, 1)
    fitted = slope * ts + intercept
    ss_res, ss_tot = float(((rss - fitted) ** 2).sum()), float(((rss - rss.mean()) ** 2).sum())
    return float(slope), 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0


def summarize(record: ProcRecord) -> ProcessOS:
    """The process's and each thread's numbers over the record's window (ProcessOS)."""
    window = max((record.ended_at or record.started_at) - record.started_at, 1e-6)
    tally = _tally_states(record)
    threads = {}
    cpu_total = wait_total = 0.0
    wait_known = False
    vol_total = invol_total = 0
    ctx_known = False
    for tid, first in record.first.items():
        last = record.last.get(tid)
        if last is None:
            continue
        cpu = max(last.cpu_s - first.cpu_s, 0.0)
        wait = _delta(first.runqueue_wait_s, last.runqueue_wait_s)
        vol = _delta(first.voluntary_ctx, last.voluntary_ctx)
        invol = _delta(first.involuntary_ctx, last.involuntary_ctx)
        cpu_total += cpu
        if wait is not None:
            wait_total += wait
            wait_known = True
        if vol is not None and invol is not None:
            vol_total += vol
            invol_total += invol
            ctx_known = True
        states = tally.states.get(tid, {})
        threads[tid] = ProcThread(tid=tid, comm=record.thread_names.get(tid, ""), cpu_s=cpu,
                                  runqueue_wait_s=wait, voluntary_ctx=vol, involuntary_ctx=invol,
                                  state_counts=states, observer_stops=tally.stops.get(tid, 0),
                                  ticks=tuple(tally.ticks.get(tid, ())),
                                  user_s=_delta(first.user_s, last.user_s),
                                  system_s=_delta(first.system_s, last.system_s))
    for tid, obs in tally.states.items():
        if tid in threads:
            continue
        threads[tid] = ProcThread(tid=tid, comm=record.thread_names.get(tid, ""), state_counts=obs,
                                  observer_stops=tally.stops.get(tid, 0),
                                  ticks=tuple(tally.ticks.get(tid, ())), counted=False)
    cores = max(record.cores, 1)
    usable = min(cores, record.cpu_quota_cores) if record.cpu_quota_cores else cores
    slope, r2 = _rss_trend(record.rss_samples)
    times = _process_times(record)
    writes, reads = _change(record.write_syscalls), _change(record.read_syscalls)
    process_cpu = times.get("process_user_s", 0.0) + times.get("process_system_s", 0.0)
    cpu = max(cpu_total, process_cpu)
    return ProcessOS(
        window_s=window, cores=cores, cpu_quota_cores=record.cpu_quota_cores,
        threads_max=max(tally.threads_seen.values(), default=len(threads)),
        cpu_s=cpu, cpu_utilization=cpu / (window * usable), seen_threads_cpu_s=cpu_total,
        io_syscalls=writes + reads if writes is not None and reads is not None else None,
        read_bytes=_change(record.read_chars), read_calls=reads,
        storage_read_bytes=_change(record.storage_reads),
        runqueue_wait_s=wait_total if wait_known else None,
        runqueue_ratio=runqueue_ratio(wait_total, cpu_total, cpu) if wait_known else None,
        mean_runnable=float(np.mean(list(tally.running.values()))) if tally.running else 0.0,
        involuntary_ctx_per_s=invol_total / window if ctx_known else None,
        voluntary_ctx_per_s=vol_total / window if ctx_known else None,
        observer_stop_share=tally.observer / tally.total if tally.total else 0.0,
        rss_start=record.rss_samples[0][1] if record.rss_samples else None,
        rss_end=record.rss_samples[-1][1] if record.rss_samples else None,
        rss_slope_bytes_per_s=slope, rss_fit_r2=r2, threads=threads,
        write_syscalls=writes,
        machine_idle_cores=_idle_cores(record), rss_steps=rss_steps(record.rss_samples),
        **_throttling(record), **times, collector=_collector(record))


def _collector(record: ProcRecord) -> CollectorState | None:
    gc = record.gc
    if gc is None:
        return None
    counts = gc.collections
    return CollectorState(gc.polls, gc.collecting_share, gc.polled_s,
                          (counts[0], counts[1], counts[2]) if counts is not None else None,
                          gc.unreadable)


class _Times(TypedDict, total=False):
    """ProcessOS's process-level CPU fields, when measured."""

    process_user_s: float
    process_system_s: float
    reaped_children_s: float
    minor_faults: int


def _process_times(record: ProcRecord) -> _Times:
    """The process's own CPU (user, kernel), its reaped children's and its minor page faults
    over the window: the change of /proc/PID/stat's counters between the first and the latest
    snapshot (the faults where both snapshots have them)."""
    if len(record.process_cpu) != 2:
        return {}
    first, last = (ProcessTimes.from_list(c) for c in record.process_cpu)
    times: _Times = {"process_user_s": max(last.user_s - first.user_s, 0.0),
                     "process_system_s": max(last.system_s - first.system_s, 0.0),
                     "reaped_children_s": max(last.reaped_s - first.reaped_s, 0.0)}
    if first.minor_faults is not None and last.minor_faults is not None:
        times["minor_faults"] = max(last.minor_faults - first.minor_faults, 0)
    return times


def _change(snapshots: list[int]) -> int | None:
    """A counter's change from the first snapshot to the latest; None without both."""
    return snapshots[-1] - snapshots[0] if len(snapshots) == 2 else None


def sum_known(values: list[int | None]) -> int | None:
    """The sum where every value is known, else None."""
    return None if any(v is None for v in values) else sum(v or 0 for v in values)


def rss_steps(samples: list[tuple[float, int]]) -> RssSteps | None:
    """The rises and falls of resident memory between consecutive ticks (RssSteps); None
    without a few ticks, or when it never moved."""
    if len(samples) < 5:
        return None
    moves = np.diff(np.array([rss for _, rss in samples], dtype=float))
    rises, falls = float(moves.clip(min=0).sum()), float((-moves).clip(min=0).sum())
    if rises + falls <= 0:
        return None
    net = rises - falls
    largest = float(moves.max()) / net if net > 0 else 1.0
    return RssSteps(fall_fraction=falls / (rises + falls), largest_rise_fraction=largest)


def _throttling(record: ProcRecord) -> _Throttle:
    """ProcessOS's throttling fields: the counters' change between the first and last snapshot."""
    if len(record.cpu_throttling) != 2:
        return {}
    (periods0, throttled0, seconds0), (periods1, throttled1, seconds1) = record.cpu_throttling
    return {"throttle_periods": int(max(periods1 - periods0, 0)),
            "throttled_periods": int(max(throttled1 - throttled0, 0)),
            "throttled_s": float(max(seconds1 - seconds0, 0.0)), "cpu_cgroup": record.cpu_cgroup}


def _idle_cores(record: ProcRecord) -> float | None:
    if len(record.machine_idle_s) != 2 or not record.ended_at:
        return None
    # /proc/stat counts idle time of every CPU of the machine, also those outside the
    # affinity; the process can use at most its usable cores anyway (see core_room).
    span = max(record.ended_at - record.started_at, 1e-6)
    return max(0.0, (record.machine_idle_s[1] - record.machine_idle_s[0]) / span)


# The counted threads' share of the process's CPU under which their run-queue wait is not taken
# per their own CPU (runqueue_ratio).
REPRESENTATIVE_SHARE = 0.5


def _representative(counted_cpu_s: float, process_cpu_s: float) -> bool:
    """The counted threads ran most of the process's CPU: their run-queue wait is per their own."""
    return counted_cpu_s > 0 and counted_cpu_s >= REPRESENTATIVE_SHARE * process_cpu_s


def runqueue_ratio(wait_s: float, counted_cpu_s: float, process_cpu_s: float) -> float | None:
    """Run-queue wait per CPU-second: the counted threads' wait per their own CPU, where they
    ran most of the process's. Where threads came and went between reads (a thread per request)
    and the counted ones ran under half of it, those read twice are the ones that lived long,
    often because they waited for a core: per their own CPU the wait read 35.9 s per
    CPU-second on a thread-per-request server that waited 1.9 s at least. There it is their
    wait per the process's CPU: a floor, the others' waits unread. None without CPU."""
    if _representative(counted_cpu_s, process_cpu_s):
        return wait_s / counted_cpu_s
    return wait_s / process_cpu_s if process_cpu_s > 0 else None


def combine(summaries: list[ProcessOS]) -> ProcessOS:
    """Several processes' summaries as one (the whole service): sums of CPU, waits, runnable
    threads and memory over the same window; every thread kept."""
    if len(summaries) == 1:
        return summaries[0]
    first = summaries[0]
    window = max(s.window_s for s in summaries)
    usable = first.usable_cores
    cpu = sum(s.cpu_s for s in summaries)
    seen_cpu = sum(s.threads_cpu_s for s in summaries)
    waits = [s.runqueue_wait_s for s in summaries if s.runqueue_wait_s is not None]
    vol = [s.voluntary_ctx_per_s for s in summaries if s.voluntary_ctx_per_s is not None]
    invol = [s.involuntary_ctx_per_s for s in summaries if s.involuntary_ctx_per_s is not None]
    weights = [max(s.threads_max, 1) for s in summaries]
    threads = {}
    for s in summaries:
        threads.update(s.threads)
    rss_start = [s.rss_start for s in summaries if s.rss_start is not None]
    rss_end = [s.rss_end for s in summaries if s.rss_end is not None]
    slopes = [s.rss_slope_bytes_per_s for s in summaries if s.rss_slope_bytes_per_s is not None]
    return ProcessOS(
        window_s=window, cores=first.cores, cpu_quota_cores=first.cpu_quota_cores,
        threads_max=sum(s.threads_max for s in summaries), cpu_s=cpu, seen_threads_cpu_s=seen_cpu,
        cpu_utilization=cpu / (window * usable) if usable else 0.0,
        runqueue_wait_s=sum(waits) if waits else None,
        runqueue_ratio=runqueue_ratio(sum(waits), seen_cpu, cpu) if waits else None,
        mean_runnable=sum(s.mean_runnable for s in summaries),
        involuntary_ctx_per_s=sum(invol) if invol else None,
        voluntary_ctx_per_s=sum(vol) if vol else None,
        observer_stop_share=float(np.average([s.observer_stop_share for s in summaries], weights=weights)),
        rss_start=sum(rss_start) if rss_start else None, rss_end=sum(rss_end) if rss_end else None,
        rss_slope_bytes_per_s=sum(slopes) if slopes else None, rss_fit_r2=None, threads=threads,
        write_syscalls=None,
        io_syscalls=sum_known([s.io_syscalls for s in summaries]),
        read_bytes=sum_known([s.read_bytes for s in summaries]),
        read_calls=sum_known([s.read_calls for s in summaries]),
        storage_read_bytes=sum_known([s.storage_read_bytes for s in summaries]),
        machine_idle_cores=min((s.machine_idle_cores for s in summaries
                                if s.machine_idle_cores is not None), default=None),
        **_combined_throttling(summaries), **_combined_times(summaries))


def _combined_times(summaries: list[ProcessOS]) -> _Times:
    """The processes' own and reaped CPU summed, when every one of them has it (their faults
    where every one has those too)."""
    if any(s.process_user_s is None for s in summaries):
        return {}
    times: _Times = {"process_user_s": sum(s.process_user_s or 0.0 for s in summaries),
                     "process_system_s": sum(s.process_system_s or 0.0 for s in summaries),
                     "reaped_children_s": sum(s.reaped_children_s or 0.0 for s in summaries)}
    faults = sum_known([s.minor_faults for s in summaries])
    if faults is not None:
        times["minor_faults"] = faults
    return times


def _combined_throttling(summaries: list[ProcessOS]) -> _Throttle:
    """The throttling of every distinct cgroup among the processes: processes in one group
    share its counters (counted once), separate groups add up."""
    groups = {s.cpu_cgroup: s for s in summaries if s.throttle_periods is not None}
    if not groups:
        return {}
    kept = list(groups.values())
    return {"throttle_periods": sum(s.throttle_periods or 0 for s in kept),
            "throttled_periods": sum(s.throttled_periods or 0 for s in kept),
            "throttled_s": sum(s.throttled_s or 0.0 for s in kept),
            "cpu_cgroup": kept[0].cpu_cgroup if len(kept) == 1 else None}

