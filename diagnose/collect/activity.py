"""What each process of the target is doing before the window: threads, and which of them run.

The sampling plan shares its budget by activity (plan.py): a supervisor whose one thread sleeps
in a wait needs few samples, a worker whose threads burn CPU needs the rate. /proc CPU ticks
per thread, read twice around the probe that precedes every window, tell them apart for free
(the probe takes a second or two anyway). OS counters, not samples: cheap and exact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from diagnose.collect.procfs import CLOCK_TICKS, list_tids, parse_stat, read_proc_text

# A thread is busy when it was charged a CPU clock tick (10 ms) between the two reads: a thread
# asleep in a wait, woken by a timer now and then, is charged microseconds. Not a share of a
# core: on a loaded machine busy threads get little of one. Not the state letter either: there
# a woken sleeper sits runnable ("R") in the run queue.
MIN_INTERVAL_S = 0.3


@dataclass(frozen=True)
class CpuSnapshot:
    """Per process, per thread: CPU seconds at one instant."""

    at: float  # time.monotonic()
    cpu: dict[int, dict[int, float]]  # pid -> tid -> cpu seconds
    cmdlines: dict[int, tuple[str, ...]]


@dataclass(frozen=True)
class ProcessActivity:
    pid: int
    threads: int
    busy_threads: int  # threads charged CPU between the reads
    cpu_cores: float  # CPU the process used per second between the reads
    program: tuple[str, ...]  # its command line: processes running the same program share code

    @property
    def busy(self) -> bool:
        return self.busy_threads > 0


def _cmdline(pid: int) -> tuple[str, ...]:
    text = read_proc_text(f"/proc/{pid}/cmdline")
    return tuple(part for part in (text or "").split("\0") if part)


def snapshot(pids: list[int]) -> CpuSnapshot:
    cpu: dict[int, dict[int, float]] = {}
    for pid in pids:
        threads = {}
        for tid in list_tids(pid):
            stat = read_proc_text(f"/proc/{pid}/task/{tid}/stat")
            if stat is not None:
                threads[tid] = parse_stat(stat)[2]
        if threads:
            cpu[pid] = threads
    return CpuSnapshot(time.monotonic(), cpu, {pid: _cmdline(pid) for pid in cpu})


def measure(before: CpuSnapshot, pids: list[int]) -> list[ProcessActivity]:
    """The activity of `pids` since `before` (waiting until MIN_INTERVAL_S has passed, so a
    fast probe still leaves a few clock ticks to count). A process born since counts as busy:
    nothing says it is idle."""
    wait = MIN_INTERVAL_S - (time.monotonic() - before.at)
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
        tick = 1.0 / CLOCK_TICKS
        busy = sum(1 for d in used.values() if d >= tick - 1e-9)
        found.append(ProcessActivity(pid, len(threads), busy, round(sum(used.values()) / elapsed, 3),
                                     after.cmdlines.get(pid, ())))
    return found
