"""The CPU of a process's children, and what they were: read from the kernel's counters first.

A child that lives a few milliseconds (a converter, a checksum tool a request runs through
`subprocess.run`) is in none of the service's samples and, mostly, in no listing of /proc: the
/proc sampler looks for descendants twice a second. What the kernel keeps counts them all:

- the CPU of the children the process reaped (waited for) over the window: its /proc/PID/stat
  cutime + cstime delta (whatever those children ran, the exec and the dynamic linker included);
- the CPU of the descendants not sampled that were still alive when seen (a shell, a
  long-lived converter: TreeRecord.other_children), with the command lines read then;
- how many: the children the sampler saw, the pids the process's threads were seen waiting for
  (wait4 / waitid: the kernel record's first argument), and the machine's fork counter over the
  window (collect/forks.py), an upper bound (every process on the host draws from it);
- where: the service's Python line that starts them (spawn_sites): the caller of the standard
  library's process-starting functions (subprocess, os.system / os.popen, os.fork, os.posix_spawn,
  asyncio's create_subprocess_*), in the samples of the process's threads.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from diagnose.collect.kernel_waits import syscall_name
from diagnose.collect.procfs import ProcRecord, ProcessTimes, TreeRecord
from diagnose.samples.profile import Frame, Profile
from diagnose.model.line_samples import LineSamples

# Python functions that start a process, by the file that defines them (a suffix) and their
# names (py-spy's qualified names on 3.11+, bare names before).
SPAWN_FUNCTIONS: dict[str, frozenset[str]] = {
    # the longer suffix first: asyncio's subprocess.py also ends in "/subprocess.py"
    "asyncio/subprocess.py": frozenset({"create_subprocess_exec", "create_subprocess_shell",
                                        "Process.communicate", "communicate", "Process.wait", "wait"}),
    "subprocess.py": frozenset({"run", "call", "check_call", "check_output", "getoutput",
                                "getstatusoutput", "Popen.__init__", "__init__", "Popen._execute_child",
                                "_execute_child", "Popen.communicate", "communicate", "Popen.wait",
                                "wait", "Popen._wait", "_wait", "Popen._communicate", "_communicate"}),
    "os.py": frozenset({"popen", "_spawnvef", "spawnv", "spawnve", "spawnvp", "spawnvpe", "spawnl",
                        "spawnle", "spawnlp", "spawnlpe"}),
}
# The standard library's own files a spawn passes through on its way to the caller's line.
_PLUMBING = ("subprocess.py", "os.py", "asyncio/subprocess.py", "asyncio/base_subprocess.py",
             "asyncio/unix_events.py", "contextlib.py", "selectors.py")
WAIT_CALLS = ("wait4", "waitid")


def spawns(frame: Frame) -> bool:
    """The frame is a standard-library function that starts (or waits for) a child process."""
    if frame.native:
        return False
    for suffix, names in SPAWN_FUNCTIONS.items():
        if frame.file.endswith("/" + suffix) or frame.file == suffix:
            return frame.function in names
    return False


def _plumbing(frame: Frame) -> bool:
    return not frame.native and any(frame.file.endswith("/" + p) or frame.file == p for p in _PLUMBING)


def spawn_sites(profile: Profile, counts: np.ndarray, limit: int = 5) -> tuple[tuple[LineSamples, ...], int]:
    """The lines that start children (the caller of the outermost spawning frame, past the
    standard library's plumbing), most samples first, and the samples in a spawn. `counts`:
    samples per stack of the threads asked about."""
    tally: dict[tuple[str, str, int], float] = {}
    total = 0.0
    for sid in np.flatnonzero(counts > 0):
        stack = profile.stacks[int(sid)]
        frames = [profile.frames[f] for f in stack]
        first = next((i for i, f in enumerate(frames) if spawns(f)), None)
        if first is None:
            continue
        total += float(counts[sid])
        at = next((i for i in range(first - 1, -1, -1)
                   if not frames[i].native and not _plumbing(frames[i])), None)
        if at is None:
            continue
        frame = frames[at]
        key = (frame.function, frame.file, frame.line)
        tally[key] = tally.get(key, 0.0) + float(counts[sid])
    ranked = sorted(tally.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    return tuple(LineSamples(f, file, line, int(round(n))) for (f, file, line), n in ranked), int(round(total))


@dataclass(frozen=True)
class ChildProcesses:
    """A process's children over the window, by the kernel's counters and what was seen of them.

    `reaped_s`: the CPU of the children it reaped in the window (cutime + cstime delta);
    `alive_s`: the CPU over the window of its children not sampled that were seen alive;
    `own_s`: its own CPU (user + system). `seen`: distinct children seen alive (not sampled);
    `waited`: distinct pids its threads were seen waiting for (wait4 / waitid); `machine_forks`:
    processes the whole machine started over the window (None: not read). `commands`: the
    children's command lines seen, with how many children ran each, most first."""

    own_s: float
    reaped_s: float
    alive_s: float
    seen: int
    waited: int
    machine_forks: int | None
    commands: tuple[tuple[str, int], ...]
    window_s: float

    @property
    def cpu_s(self) -> float:
        return self.reaped_s + self.alive_s

    @property
    def share(self) -> float:
        """The children's share of the CPU the process and its children used."""
        total = self.own_s + self.cpu_s
        return self.cpu_s / total if total > 0 else 0.0

    @property
    def started_at_least(self) -> int:
        """Children known to have run in the window: those seen alive, or waited for."""
        return max(self.seen, self.waited)


def _times(record: ProcRecord) -> tuple[ProcessTimes, ProcessTimes] | None:
    if len(record.process_cpu) < 2:
        return None
    return ProcessTimes.from_list(record.process_cpu[0]), ProcessTimes.from_list(record.process_cpu[-1])


def _waited_pids(record: ProcRecord) -> set[int]:
    kernel = record.kernel
    if kernel is None:
        return set()
    out = set()
    for _t, _tid, nr, a0, a1, _a2, _wchan in kernel.observations:
        name = syscall_name(nr, kernel.machine)
        if name == "wait4" and 0 < a0 < 1 << 22:
            out.add(a0)
        elif name == "waitid" and 0 < a1 < 1 << 22:  # waitid(P_PID, pid, ...)
            out.add(a1)
    return out


def child_processes(tree: TreeRecord | None, pid: int | None) -> ChildProcesses | None:
    """The children of process `pid` over the window; None without its process-level counters
    (an older recording, or no /proc record)."""
    if tree is None or pid is None or pid not in tree.records:
        return None
    record = tree.records[pid]
    times = _times(record)
    if times is None:
        return None
    first, last = times
    own = max(0.0, last.own_s - first.own_s)
    # children sampled as processes of the service are counted as themselves, not here: one that
    # exited in the window was reaped too (its window's CPU taken out, as model/cpu_account does)
    sampled = {p for p, parent in tree.parents.items() if parent == pid}
    reaped_sampled = 0.0
    for child in sampled:
        child_times = _times(tree.records[child]) if child in tree.records else None
        if child_times is not None and tree.records[child].target_exited:
            reaped_sampled += max(0.0, child_times[1].own_s - child_times[0].own_s)
    reaped = max(0.0, last.reaped_s - first.reaped_s - reaped_sampled)
    # a child gone before its parent was read is the only sampled process's, when there is one
    only = len(tree.records) == 1
    mine = {child: entry for child, entry in tree.other_children.items()
            if child not in sampled and ((entry[0] is not None and int(entry[0]) == pid)
                                         or (entry[0] is None and only))}
    alive = sum(max(0.0, last_s - (first_s or 0.0)) for _ppid, first_s, last_s in mine.values()
                if last_s is not None)
    own_cmdline = tree.cmdlines.get(pid, [])
    commands: Counter[str] = Counter()
    for child in mine:
        cmdline = tree.other_cmdlines.get(child)
        # a child read between its fork and its exec still shows its parent's command line
        if cmdline and cmdline != own_cmdline:
            commands[" ".join(cmdline)] += 1
    forks = tree.forks[-1] - tree.forks[0] if len(tree.forks) >= 2 else None
    window = max((record.ended_at or record.started_at) - record.started_at, 0.0)
    return ChildProcesses(own_s=own, reaped_s=reaped, alive_s=alive, seen=len(mine),
                          waited=len(_waited_pids(record) - sampled), machine_forks=forks,
                          commands=tuple(sorted(commands.items(), key=lambda kv: (-kv[1], kv[0]))),
                          window_s=window)
