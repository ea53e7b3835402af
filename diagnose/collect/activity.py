"""What each process of the target is doing before the window: threads, and which of them run.

The sampling plan shares its budget by activity (plan.py): a supervisor whose one thread sleeps
in a wait needs few samples, a worker whose threads burn CPU needs the rate, and workers that
want every core between them leave the observer none (plan.py halves its budgets). Each
thread's schedstat (nanoseconds run and runnable), read twice around the probe that precedes
every window, tells them apart for free (the probe takes a second or two anyway). OS counters,
not samples: cheap and exact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from diagnose.collect.procfs import CLOCK_TICKS, list_tids, parse_stat, read_proc_text

# A thread is busy when it ran for BUSY_RUN_SHARE of the interval between the two reads, or
# wanted a CPU (ran, or sat runnable in the run queue) for BUSY_DEMAND_SHARE of it, by
# schedstat's nanosecond counters. Not the clock ticks of /proc stat: those are charged by
# sampling, so on a machine loaded by other tenants a busy thread (a sliver of a core: 3% each
# was measured for 12 busy threads beside other tenants on 2 cores) may go an interval without a
# tick, while a sleeper woken now and then (a supervisor's wait loop) is charged a whole tick
# when the timer happens to find it running. Demand covers the loaded machine (the busy thread
# sits runnable nearly all the interval; a woken sleeper queues a few ms per wake: at most 12%
# measured), run time the quiet one. Without schedstat: a charged clock tick (10 ms).
MIN_INTERVAL_S = 0.3
# With schedstat's nanoseconds for every thread, half that tells a busy thread (7.5 ms of run
# against a supervisor's sub-millisecond wakes) and takes 0.15 s off every attach's start-up.
MIN_SCHEDSTAT_INTERVAL_S = 0.15
BUSY_RUN_SHARE = 0.05
BUSY_DEMAND_SHARE = 0.5
# ...and a thread busy by its demand ran at least this long: a sleeper woken once runs for
# microseconds however long it then queues for a core (CI saw a 0.5 s sleep loop's process wait
# 0.47 s of 0.5 runnable beside the suite, and read it busy); a busy thread starved by other
# tenants still runs milliseconds (8 ms of 0.5 s measured).
BUSY_MIN_RUN_S = 0.002


@dataclass(frozen=True)
class CpuSnapshot:
    """Per process, per thread: CPU seconds at one instant."""

    at: float  # time.monotonic()
    cpu: dict[int, dict[int, float]]  # pid -> tid -> cpu seconds
    cmdlines: dict[int, tuple[str, ...]]
    # pid -> tid -> seconds run, to the nanosecond (schedstat), where the kernel keeps it
    run: dict[int, dict[int, float]] = field(default_factory=dict)
    # pid -> tid -> seconds run plus seconds runnable in the run queue (schedstat)
    demand: dict[int, dict[int, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessActivity:
    pid: int
    threads: int
    busy_threads: int  # threads charged CPU between the reads
    cpu_cores: float  # CPU the process used per second between the reads
    program: tuple[str, ...]  # its command line: processes running the same program share code
    # cores the process wanted (ran or sat runnable), per second; nan where schedstat is not
    # kept. Unlike cpu_cores it does not shrink when other tenants take the cores.
    demand_cores: float = float("nan")

    @property
    def busy(self) -> bool:
        return self.busy_threads > 0


def _cmdline(pid: int) -> tuple[str, ...]:
    text = read_proc_text(f"/proc/{pid}/cmdline")
    return tuple(part for part in (text or "").split("\0") if part)


def _schedstat(pid: int, tid: int) -> tuple[float, float] | None:
    """(seconds run, seconds run + seconds runnable) from /proc schedstat, or None."""
    parts = (read_proc_text(f"/proc/{pid}/task/{tid}/schedstat") or "").split()
    if len(parts) < 2:
        return None
    return int(parts[0]) / 1e9, (int(parts[0]) + int(parts[1])) / 1e9


# The first read of `attach PID...`, taken as the command starts (cli/__init__): its PIDs -> read.
_early_reads: dict[tuple[int, ...], CpuSnapshot] = {}


def read_early(argv: list[str]) -> None:
    """The plan's first read taken as `attach` starts, before the CLI's imports, for the PIDs
    that lead its arguments (`attach 123 456 --duration 5`): those imports then fill the interval
    the plan waits out (0.05-0.1 s of the start-up it waited before). Never raises: anything
    unreadable is read again by first_read."""
    pids = []
    for arg in argv:
        if not arg.isdigit():
            break
        pids.append(int(arg))
    if not pids:
        return
    try:
        _early_reads[tuple(pids)] = tree_snapshot(pids)
    except Exception:
        pass


def first_read(pids: list[int]) -> CpuSnapshot:
    """The plan's first read of these PIDs' trees: the one read_early took, else one now."""
    early = _early_reads.pop(tuple(pids), None)
    return early if early is not None else tree_snapshot(pids)


def tree_snapshot(pids: list[int]) -> CpuSnapshot:
    """A snapshot of the PIDs and every descendant of theirs."""
    from diagnose.collect.tree import descendants

    return snapshot([*pids, *(d for p in pids for d in descendants(p))])


def snapshot(pids: list[int]) -> CpuSnapshot:
    cpu: dict[int, dict[int, float]] = {}
    run: dict[int, dict[int, float]] = {}
    demand: dict[int, dict[int, float]] = {}
    for pid in pids:
        threads, ran, wanted = {}, {}, {}
        for tid in list_tids(pid):
            stat = read_proc_text(f"/proc/{pid}/task/{tid}/stat")
            if stat is not None:
                threads[tid] = parse_stat(stat)[2]
                sched = _schedstat(pid, tid)
                if sched is not None:
                    ran[tid], wanted[tid] = sched
        if threads:
            cpu[pid] = threads
            run[pid] = ran
            demand[pid] = wanted
    return CpuSnapshot(time.monotonic(), cpu, {pid: _cmdline(pid) for pid in cpu}, run, demand)


def busy_thread_count(cpu_used: dict[int, float], run_used: dict[int, float],
                      elapsed_s: float, demand_used: dict[int, float] | None = None) -> int:
    """Threads that ran for BUSY_RUN_SHARE of `elapsed_s` or wanted a CPU for
    BUSY_DEMAND_SHARE of it (schedstat deltas), or, for a thread without schedstat, that were
    charged a clock tick (/proc stat deltas)."""
    tick = 1.0 / CLOCK_TICKS
    busy = 0
    for tid, used in cpu_used.items():
        ran = run_used.get(tid)
        if ran is not None:
            wanted = (demand_used or {}).get(tid, 0.0)
            busy += ran >= BUSY_RUN_SHARE * elapsed_s or (wanted >= BUSY_DEMAND_SHARE * elapsed_s
                                                          and ran >= BUSY_MIN_RUN_S)
        else:
            busy += used >= tick - 1e-9
    return busy


def interval_s(before: CpuSnapshot) -> float:
    """The least time between the two reads: MIN_SCHEDSTAT_INTERVAL_S when schedstat timed every
    thread read, else MIN_INTERVAL_S (clock ticks are 10 ms: a short interval counts too few)."""
    timed = all(before.run.get(pid, {}).keys() >= threads.keys()
                for pid, threads in before.cpu.items())
    return MIN_SCHEDSTAT_INTERVAL_S if before.cpu and timed else MIN_INTERVAL_S


def measure(before: CpuSnapshot, pids: list[int]) -> list[ProcessActivity]:
    """The activity of `pids` since `before` (waiting until interval_s(before) has passed, so a
    fast probe still leaves a few clock ticks to count). A process born since counts as busy:
    nothing says it is idle."""
    wait = interval_s(before) - (time.monotonic() - before.at)
    if wait > 0:
        time.sleep(wait)
    after = snapshot(pids)
    elapsed = max(after.at - before.at, 1.0 / CLOCK_TICKS)
    found = []
    for pid, threads in after.cpu.items():
        earlier = before.cpu.get(pid)
        if earlier is None:
            found.append(ProcessActivity(pid, len(threads), len(threads), float("nan"),
                                         after.cmdlines.get(pid, ())))
            continue
        used = {tid: cpu - earlier.get(tid, 0.0) for tid, cpu in threads.items()}
        ran = _grown(before.run.get(pid, {}), after.run.get(pid, {}))
        wanted = _grown(before.demand.get(pid, {}), after.demand.get(pid, {}))
        busy = busy_thread_count(used, ran, elapsed, wanted)
        demand = sum(wanted.values()) / elapsed if after.demand.get(pid) else float("nan")
        found.append(ProcessActivity(pid, len(threads), busy, round(sum(used.values()) / elapsed, 3),
                                     after.cmdlines.get(pid, ()), round(demand, 3)))
    return found


def _grown(before: dict[int, float], after: dict[int, float]) -> dict[int, float]:
    """Each thread's growth of a schedstat counter between the two reads (threads in both)."""
    return {tid: seconds - before[tid] for tid, seconds in after.items() if tid in before}
