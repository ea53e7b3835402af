"""The observer's own CPU over the sampling window, beside the target's.

The observer is diagnose's process (every thread: the main loop, the /proc sampler, the asyncio
task readers) and every process it started (the py-spy recorders, a helper interpreter). It is
read from /proc twice, at the window's start and at its end, a few small reads each (not a
poller):

- /proc/self/stat: this process's utime + stime (its threads, those that ended too) and
  cutime + cstime (the children it waited for, and theirs: what getrusage(RUSAGE_CHILDREN) says);
- /proc/<pid>/stat of each child still there (listed by /proc/self/task/*/children): its own
  CPU and its reaped children's (a zombie's too: it still holds its times until reaped).

Between the two readings the observer used

    Δ own + Δ reaped + Σ children there at the end − Σ children there at the start:

a child that ran at the start and was reaped before the end moves its whole CPU into `reaped`,
and what it had used before the window is taken back off by the start's term; a child started
and reaped inside the window is all in Δ reaped.

The target's CPU is the /proc sampler's (TreeRecord): each sampled thread's CPU between its
first and last reading, summed over the tree, over the sampler's span.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from diagnose.collect.procfs import CLOCK_TICKS, TreeRecord, read_proc_text
from diagnose.collect.run_context import WindowCpu


@dataclass(frozen=True)
class CpuReading:
    """The observer's cumulative CPU seconds at one instant."""

    at: float  # time.monotonic()
    own_s: float  # this process: every thread, live or ended
    reaped_s: float  # the children it waited for (and theirs)
    children: Mapping[int, float] = field(default_factory=dict)  # pid -> a child still there


def stat_cpu(text: str) -> tuple[float, float]:
    """(own, reaped children's) CPU seconds of a /proc/<pid>/stat line: utime + stime and
    cutime + cstime. The command name may hold spaces and ')': fields are counted after the last."""
    fields = text[text.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return (utime + stime) / CLOCK_TICKS, (cutime + cstime) / CLOCK_TICKS


def reading(own_stat: str, child_stats: Mapping[int, str], at: float) -> CpuReading:
    """A reading from stat texts: this process's and each child's still there."""
    own, reaped = stat_cpu(own_stat)
    return CpuReading(at, own, reaped, {pid: sum(stat_cpu(text)) for pid, text in child_stats.items()})


def used(start: CpuReading, end: CpuReading) -> WindowCpu:
    """What the observer used between two readings: its own process, and its children."""
    own = end.own_s - start.own_s
    children = (end.reaped_s - start.reaped_s + sum(end.children.values())
                - sum(start.children.values()))
    return WindowCpu(own_cpu_s=max(own, 0.0), children_cpu_s=max(children, 0.0),
                     window_s=max(end.at - start.at, 0.0))


def child_pids() -> list[int]:
    """The processes this one started that are still there (running, or exited and not yet
    reaped): each thread's `children` file (a child belongs to the thread that forked it); a
    scan of /proc by psutil where the kernel has no such file."""
    pids: list[int] = []
    listed = False
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        tids = []
    for tid in tids:
        text = read_proc_text(f"/proc/self/task/{tid}/children")
        if text is None:
            continue
        listed = True
        pids.extend(int(p) for p in text.split())
    if not listed:
        import psutil
        try:
            pids = [p.pid for p in psutil.Process().children()]
        except psutil.Error:
            pids = []
    return list(dict.fromkeys(pids))


def read(children: Iterable[int] | None = None) -> CpuReading | None:
    """The observer's CPU now (None where /proc cannot be read). `children`: the pids to read
    (by default every child still there)."""
    at = time.monotonic()
    own = read_proc_text("/proc/self/stat")
    if own is None:
        return None
    stats = {}
    for pid in child_pids() if children is None else children:
        text = read_proc_text(f"/proc/{pid}/stat")
        if text is not None:
            stats[pid] = text
    try:
        return reading(own, stats, at)
    except (ValueError, IndexError):
        return None


def tree_cpu(tree: TreeRecord) -> tuple[float, float] | None:
    """(CPU seconds, span) of the target tree as the /proc sampler read it: each thread's CPU
    between its first and last reading (model/os_summary.py's sum), over the longest process
    span; None when no process was read to its end."""
    cpu = span = 0.0
    for record in tree.records.values():
        for tid, first in record.first.items():
            last = record.last.get(tid)
            if last is not None:
                cpu += max(last.cpu_s - first.cpu_s, 0.0)
        if record.ended_at is not None:
            span = max(span, record.ended_at - record.started_at)
    return (cpu, span) if span > 0 else None


def window_cpu(start: CpuReading | None, end: CpuReading | None,
               tree: TreeRecord | None) -> WindowCpu | None:
    """The observer's CPU between `start` and `end` beside the target tree's, rounded as the
    report writes them; None without both readings."""
    if start is None or end is None:
        return None
    mine = used(start, end)
    target = tree_cpu(tree) if tree is not None else None
    return WindowCpu(own_cpu_s=round(mine.own_cpu_s, 3),
                     children_cpu_s=round(mine.children_cpu_s, 3),
                     window_s=round(mine.window_s, 3),
                     target_cpu_s=round(target[0], 3) if target is not None else None,
                     target_window_s=round(target[1], 3) if target is not None else None)
