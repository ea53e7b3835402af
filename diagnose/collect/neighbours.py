"""The machine's other processes' CPU over the window: who held the cores the service waited for.

A service whose threads are runnable yet get no core is starved either by its own threads (more
of them than cores) or by other processes. The kernel knows which: every process's utime + stime
(/proc/PID/stat fields 14-15). Two scans, at the /proc sampler's start and finish
(procfs.TreeSampler), read each process's stat once; the command lines of the few kept are read
at the end. Measured on this project's 2-core machine with 78 processes: 0.57 ms a scan (7 us a
process), 2.1 ms for the finishing scan with its few command lines: about 10 ms per attach on a
host with a thousand processes.

What the scan cannot see: a process that started and exited inside the window (its CPU went to
its parent's reaped children, not counted here). The machine's idle time (/proc/stat, read by the
sampler) covers them: the check infers the others' total from it and names the holders from here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from diagnose.collect.proc_text import CLOCK_TICKS, read_proc_text
from diagnose.report.redact import redact_cmdline

# A kernel thread (PF_KTHREAD in stat's flags): no command line, named by [comm] as ps does.
_PF_KTHREAD = 0x00200000
TOP = 5  # the holders a record keeps, by CPU over the window...
KEPT_MIN_CORES = 0.01  # ...that used at least a hundredth of a core: no idle daemon's command line


@dataclass(frozen=True)
class Neighbour:
    """One other process and the CPU it used over the window."""

    pid: int
    command: str  # its command line, secrets masked; [comm] for a kernel thread or an empty one
    nice: int
    cpu_s: float
    started_in_window: bool = False  # first seen at the end, started after the first scan


@dataclass(frozen=True)
class Neighbours:
    """The CPU the machine's other processes used between the two scans: not the service's
    processes, not diagnose's own (itself and its recorders). `cpu_s` is all of them, `top` the
    few that used most."""

    window_s: float  # between the two scans
    machine_cores: int  # online CPUs: what /proc/stat's idle time is counted over
    cpu_s: float
    processes: int  # other processes that used CPU in the window
    top: tuple[Neighbour, ...]

    def to_dict(self) -> dict:
        return {"window_s": self.window_s, "machine_cores": self.machine_cores, "cpu_s": self.cpu_s,
                "processes": self.processes,
                "top": [[n.pid, n.command, n.nice, n.cpu_s, n.started_in_window] for n in self.top]}

    @classmethod
    def from_dict(cls, data: dict) -> Neighbours:
        top = tuple(Neighbour(int(n[0]), redact_cmdline(str(n[1]).split(" ")), int(n[2]), float(n[3]),
                              bool(n[4])) for n in data.get("top") or [])
        return cls(float(data["window_s"]), int(data["machine_cores"]), float(data["cpu_s"]),
                   int(data.get("processes") or 0), top)


@dataclass(frozen=True)
class _Seen:
    """A process as one scan read it."""

    ppid: int
    comm: str
    nice: int
    cpu_s: float
    started_s: float  # after boot
    kernel_thread: bool


def _parse(text: str, ticks: int) -> _Seen:
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()  # fields[0] is stat's field 3 (state)
    return _Seen(ppid=int(fields[1]), comm=comm, nice=int(fields[16]),
                 cpu_s=(int(fields[11]) + int(fields[12])) / ticks, started_s=int(fields[19]) / ticks,
                 kernel_thread=bool(int(fields[6]) & _PF_KTHREAD))


def _read(path: str) -> str | None:
    """A stranger's /proc file, or None on any error reading it (not only its exit): one process
    that cannot be read leaves the others' scan whole."""
    try:
        return read_proc_text(path)
    except OSError:
        return None


def scan() -> dict[int, _Seen]:
    """Every process's stat, read once."""
    seen: dict[int, _Seen] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        text = _read(f"/proc/{name}/stat")
        if text:
            try:
                seen[int(name)] = _parse(text, CLOCK_TICKS)
            except (ValueError, IndexError):
                continue
    return seen


def _uptime_s() -> float:
    text = _read("/proc/uptime")
    return float(text.split()[0]) if text else 0.0


def _with_descendants(roots: Iterable[int], *scans: dict[int, _Seen]) -> set[int]:
    """`roots` and every process either scan saw descend from them (by stat's ppid)."""
    children: dict[int, set[int]] = {}
    for seen in scans:
        for pid, entry in seen.items():
            children.setdefault(entry.ppid, set()).add(pid)
    found, queue = set(roots), list(roots)
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


COMMAND_CHARS = 200  # of a command line kept: a java classpath or a `python -c` script runs to pages


def _command(pid: int, seen: _Seen) -> str:
    """Its command line on one line, secrets masked, at most COMMAND_CHARS; [comm] without one."""
    raw = None if seen.kernel_thread else _read(f"/proc/{pid}/cmdline")
    argv = [" ".join(a.split()) for a in (raw or "").split("\0") if a.strip()]
    if not argv:
        return f"[{seen.comm}]"
    text = redact_cmdline(argv)
    return text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 1] + "\u2026"


class NeighbourScanner:
    """`start()` at the window's start, `finish(service_pids)` at its end."""

    def __init__(self) -> None:
        self._first: dict[int, _Seen] = {}
        self._at = 0.0
        self._uptime = 0.0

    def start(self) -> None:
        self._at, self._uptime = time.monotonic(), _uptime_s()
        self._first = scan()

    def finish(self, service: Iterable[int]) -> Neighbours | None:
        """The others' CPU since start(); `service`: the service's processes (their descendants
        are left out too). Diagnose's own process and what it started are left out."""
        if not self._first:
            return None
        last = scan()
        window = time.monotonic() - self._at
        skip = _with_descendants([*service, os.getpid()], self._first, last)
        used: list[tuple[float, int, _Seen, bool]] = []
        for pid, end in last.items():
            if pid in skip:
                continue
            start = self._first.get(pid)
            if start is not None and start.started_s == end.started_s:
                used.append((end.cpu_s - start.cpu_s, pid, end, False))
            elif end.started_s > self._uptime:  # born in the window: all of its CPU is the window's
                used.append((end.cpu_s, pid, end, True))
            # else a pid missed by the first scan's listing: its share of the window is unknown
        used = [u for u in used if u[0] > 0]
        used.sort(key=lambda u: (-u[0], u[1]))
        top = tuple(Neighbour(pid, _command(pid, seen), seen.nice, round(cpu, 3), born)
                    for cpu, pid, seen, born in used[:TOP] if cpu >= KEPT_MIN_CORES * window)
        return Neighbours(round(window, 3), os.cpu_count() or 1, round(sum(u[0] for u in used), 3),
                          len(used), top)
