"""Per-thread OS state from /proc, sampled over the same window as py-spy.

Cheap reads only: each tick reads every thread's `stat` (state letter, CPU ticks) and the
process's `statm` (resident memory). The counters whose deltas matter — run-queue wait from
`schedstat`, context switches from `status` — are read once at the start and once at the end.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from diagnose.collect.forks import processes_started
from diagnose.collect.gc_state import GcPollThread, GcRecord, GcStateSampler
from diagnose.collect.kernel_waits import (FileLockEntry, KernelRecord, KernelWaitReader,
                                           pipe_ends, read_file_locks)
from diagnose.collect.neighbours import Neighbours, NeighbourScanner
from diagnose.collect.proc_text import CLOCK_TICKS, read_proc_text
from diagnose.collect.sockets import serving_pids, socket_table
from diagnose.report.redact import redact_argv

from diagnose.collect.cgroup import cpu_cgroup, read_throttling

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class ThreadCounters:
    """Cumulative counters of one thread at one instant."""

    cpu_s: float
    runqueue_wait_s: float | None
    timeslices: int | None
    voluntary_ctx: int | None
    involuntary_ctx: int | None
    # cpu_s split into user and kernel time (stat utime, stime); None in older recordings
    user_s: float | None = None
    system_s: float | None = None


@dataclass(frozen=True)
class ProcessTimes:
    """A process's cumulative CPU from its /proc/PID/stat, in seconds: its own, in user mode and
    in the kernel (every thread it ever had, exited ones too), and that of its children it has
    reaped (waited for), whatever they ran before."""

    user_s: float
    system_s: float
    children_user_s: float
    children_system_s: float
    # Minor page faults of the process (every thread it had): each a page the kernel mapped on
    # first touch, zero-filling it. None in older recordings.
    minor_faults: int | None = None

    @property
    def own_s(self) -> float:
        return self.user_s + self.system_s

    @property
    def reaped_s(self) -> float:
        return self.children_user_s + self.children_system_s

    def as_list(self) -> list[float]:
        times = [self.user_s, self.system_s, self.children_user_s, self.children_system_s]
        return times + ([float(self.minor_faults)] if self.minor_faults is not None else [])

    @classmethod
    def from_list(cls, values: list[float]) -> "ProcessTimes":
        faults = int(values[4]) if len(values) > 4 else None  # older recordings: four values
        user, system, children_user, children_system = (float(v) for v in values[:4])
        return cls(user, system, children_user, children_system, minor_faults=faults)


@dataclass
class ProcRecord:
    """Everything the /proc sampler saw: serialisable, so a session can be replayed offline."""

    pid: int
    cores: int
    cpu_quota_cores: float | None
    started_at: float
    state_samples: list[tuple[float, int, str]] = field(default_factory=list)  # (t, tid, state)
    rss_samples: list[tuple[float, int]] = field(default_factory=list)  # (t, bytes)
    thread_names: dict[int, str] = field(default_factory=dict)
    first: dict[int, ThreadCounters] = field(default_factory=dict)
    last: dict[int, ThreadCounters] = field(default_factory=dict)
    ended_at: float | None = None
    target_exited: bool = False
    # write(2)-family syscalls of the whole process at the first and last snapshot (/proc/pid/io):
    # a server writes about one per response, so the delta bounds the responses served.
    write_syscalls: list[int] = field(default_factory=list)
    # read(2)-family syscalls the same way (syscr); empty in older recordings.
    read_syscalls: list[int] = field(default_factory=list)
    # Bytes those calls read (rchar: files, pipes, terminals; not sockets' recv), the same way:
    # what a process pool's workers take in through their task pipe. Empty in older recordings.
    read_chars: list[int] = field(default_factory=list)
    # Of those, the bytes fetched from storage (read_bytes: what the page cache did not hold),
    # the same way. Empty in older recordings.
    storage_reads: list[int] = field(default_factory=list)
    # Machine-wide idle CPU seconds (/proc/stat idle + iowait) at the first and last snapshot:
    # on a shared host the cores this process leaves unused are not all free.
    machine_idle_s: list[float] = field(default_factory=list)
    # The cpu cgroup's throttling counters (cpu.stat of the group whose quota binds: shared by
    # every process in it) at the first and last snapshot, [nr_periods, nr_throttled,
    # throttled_s] each; empty with no quota (or in older recordings). collect/cgroup.py.
    cpu_throttling: list[list[float]] = field(default_factory=list)
    cpu_cgroup: str | None = None  # the group whose quota binds: "v1:/name" or "v2:/path"
    # What each blocked thread waited on, as the kernel says (collect/kernel_waits.py); None
    # where the reader did not run (older recordings, `--no-kernel-waits`).
    kernel: KernelRecord | None = None
    # A target in its own pid namespace (a container) knows its threads by other ids than ours,
    # and py-spy reports those: host tid -> the tid inside (status NSpid), where they differ.
    ns_tids: dict[int, int] = field(default_factory=dict)
    # py-spy's pthread ids -> the kernel's thread ids (as the process numbers them), where py-spy
    # named threads by pthread id (--nonblocking before CPython 3.11; collect/pthread_ids.py).
    pthread_tids: dict[int, int] = field(default_factory=dict)
    # The process's own CPU (user, kernel) and its reaped children's at the first and the latest
    # snapshot (ProcessTimes.as_list each); empty in older recordings.
    process_cpu: list[list[float]] = field(default_factory=list)
    # The garbage collector's state read from the process's memory over the window
    # (collect/gc_state.py); None where the reader did not run (older recordings).
    gc: GcRecord | None = None

    def to_dict(self) -> dict:
        return {
            "pid": self.pid, "cores": self.cores, "cpu_quota_cores": self.cpu_quota_cores,
            "started_at": self.started_at, "ended_at": self.ended_at,
            "target_exited": self.target_exited, "write_syscalls": self.write_syscalls,
            "read_syscalls": self.read_syscalls, "read_chars": self.read_chars,
            "storage_reads": self.storage_reads,
            "machine_idle_s": self.machine_idle_s,
            "cpu_throttling": self.cpu_throttling, "cpu_cgroup": self.cpu_cgroup,
            "state_samples": self.state_samples, "rss_samples": self.rss_samples,
            "thread_names": {str(k): v for k, v in self.thread_names.items()},
            "first": {str(k): vars(v) for k, v in self.first.items()},
            "last": {str(k): vars(v) for k, v in self.last.items()},
            "kernel": self.kernel.to_dict() if self.kernel is not None else None,
            "ns_tids": {str(k): v for k, v in self.ns_tids.items()},
            "pthread_tids": {str(k): v for k, v in self.pthread_tids.items()},
            "process_cpu": self.process_cpu,
            "gc": self.gc.to_dict() if self.gc is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "ProcRecord":
        rec = cls(pid=data["pid"], cores=data["cores"], cpu_quota_cores=data.get("cpu_quota_cores"),
                  started_at=data["started_at"])
        rec.ended_at = data.get("ended_at")
        rec.target_exited = bool(data.get("target_exited"))
        rec.state_samples = [tuple(s) for s in data.get("state_samples", [])]
        rec.rss_samples = [tuple(s) for s in data.get("rss_samples", [])]
        rec.write_syscalls = list(data.get("write_syscalls") or [])
        rec.read_syscalls = list(data.get("read_syscalls") or [])
        rec.read_chars = list(data.get("read_chars") or [])
        rec.storage_reads = list(data.get("storage_reads") or [])
        rec.machine_idle_s = list(data.get("machine_idle_s") or [])
        rec.cpu_throttling = [list(c) for c in data.get("cpu_throttling") or []]
        rec.cpu_cgroup = data.get("cpu_cgroup")
        rec.thread_names = {int(k): v for k, v in data.get("thread_names", {}).items()}
        rec.ns_tids = {int(k): int(v) for k, v in (data.get("ns_tids") or {}).items()}
        rec.pthread_tids = {int(k): int(v) for k, v in (data.get("pthread_tids") or {}).items()}
        rec.process_cpu = [[float(x) for x in c] for c in data.get("process_cpu") or []]
        if data.get("gc"):
            rec.gc = GcRecord.from_dict(data["gc"])
        if data.get("kernel"):
            rec.kernel = KernelRecord.from_dict(data["kernel"])
        rec.first = {int(k): ThreadCounters(**v) for k, v in data.get("first", {}).items()}
        rec.last = {int(k): ThreadCounters(**v) for k, v in data.get("last", {}).items()}
        return rec


def parse_stat(text: str) -> tuple[str, str, float]:
    """(comm, state letter, cpu seconds) from a /proc/.../stat line; comm may hold spaces and ')'."""
    open_paren, close_paren = text.index("("), text.rindex(")")
    comm = text[open_paren + 1:close_paren]
    fields = text[close_paren + 2:].split()
    state = fields[0]
    utime, stime = int(fields[11]), int(fields[12])
    return comm, state, (utime + stime) / CLOCK_TICKS


def parse_times(text: str) -> ProcessTimes:
    """utime, stime, cutime and cstime of a /proc/.../stat line, in seconds."""
    fields = text[text.rindex(")") + 2:].split()
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return ProcessTimes(utime / CLOCK_TICKS, stime / CLOCK_TICKS, cutime / CLOCK_TICKS,
                        cstime / CLOCK_TICKS, minor_faults=int(fields[7]))


def read_times(pid: int) -> ProcessTimes | None:
    """A process's CPU times now, or None when it is gone."""
    stat = read_proc_text(f"/proc/{pid}/stat")
    return parse_times(stat) if stat else None


def parse_status_ctx(text: str) -> tuple[int | None, int | None]:
    """The two context-switch counts: the last lines of a status file, found without splitting
    its fifty-odd lines (this runs for every thread of every process on each refresh)."""
    text = "\n" + text  # every key is found at a line start, the first line's too
    return _status_field(text, "\nvoluntary_ctxt_switches:"), \
        _status_field(text, "\nnonvoluntary_ctxt_switches:")


def _status_field(text: str, key: str) -> int | None:
    at = text.find(key)
    if at < 0:
        return None
    end = text.find("\n", at + len(key))
    try:
        return int(text[at + len(key):end if end >= 0 else None])
    except ValueError:
        return None


def cgroup_cpu_quota_cores(pid: int) -> float | None:
    """The cgroup CPU quota in cores (v1 cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max; the
    smallest on the way up to the root), or None when unlimited or unknown (collect/cgroup.py)."""
    reading = cpu_cgroup(pid)
    return reading.quota_cores if reading is not None else None


def namespace_tid(pid: int, tid: int) -> int | None:
    """The thread's id in the innermost pid namespace it lives in (the last NSpid field)."""
    status = read_proc_text(f"/proc/{pid}/task/{tid}/status")
    if not status:
        return None
    at = status.find("\nNSpid:")
    if at < 0:
        return None
    end = status.find("\n", at + 1)
    fields = status[at + 7:end if end >= 0 else None].split()
    try:
        return int(fields[-1]) if fields else None
    except ValueError:
        return None


def as_seen_inside(record: ProcRecord) -> ProcRecord:
    """The record with its threads named by the ids the target itself (and py-spy) uses: for a
    process in its own pid namespace; the record itself otherwise."""
    if not record.ns_tids:
        return record
    inner = record.ns_tids.get
    out = ProcRecord.from_dict(record.to_dict())
    out.ns_tids = {}
    out.state_samples = [(t, inner(tid, tid), state) for t, tid, state in record.state_samples]
    out.thread_names = {inner(k, k): v for k, v in record.thread_names.items()}
    out.first = {inner(k, k): v for k, v in record.first.items()}
    out.last = {inner(k, k): v for k, v in record.last.items()}
    if out.kernel is not None:
        out.kernel.observations = [(o[0], inner(o[1], o[1]), *o[2:])
                                   for o in out.kernel.observations]
    return out


def list_tids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return []


def read_counters(pid: int, tid: int) -> ThreadCounters | None:
    base = f"/proc/{pid}/task/{tid}"
    stat = read_proc_text(f"{base}/stat")
    if stat is None:
        return None
    _, _, cpu_s = parse_stat(stat)
    times = parse_times(stat)
    wait_s = slices = None
    sched = read_proc_text(f"{base}/schedstat")
    if sched:
        parts = sched.split()
        if len(parts) >= 3:
            wait_s, slices = int(parts[1]) / 1e9, int(parts[2])
    vol = invol = None
    status = read_proc_text(f"{base}/status")
    if status:
        vol, invol = parse_status_ctx(status)
    return ThreadCounters(cpu_s, wait_s, slices, vol, invol, times.user_s, times.system_s)


def machine_idle_seconds() -> float | None:
    """Idle + iowait CPU seconds of the whole machine since boot (/proc/stat)."""
    text = read_proc_text("/proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    fields = text.split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / CLOCK_TICKS


def cores_available(pid: int) -> int:
    try:
        return len(os.sched_getaffinity(pid))
    except OSError:
        return os.cpu_count() or 1


class ProcSampler:
    """Call `start()`, then `tick()` as often as wanted, then `finish()`."""

    # Counters (three files per thread) are refreshed this often, by the clock, so a thread or
    # target that dies mid-window still leaves recent deltas behind. By the clock, not by ticks:
    # a tick every 0.1 s would refresh every second, most of the sampler's cost on a tree.
    COUNTER_REFRESH_S = 2.0

    def __init__(self, pid: int, kernel_waits: bool = True, gc_state: bool = False,
                 gc_polls: GcPollThread | None = None):
        self.pid = pid
        # the collector's state, polled from the process's memory (collect/gc_state.py), on
        # `gc_polls` (the tree's one poll thread) where given
        self.gc: GcStateSampler | None = GcStateSampler(pid, gc_polls) if gc_state else None
        self._ticks = 0
        self._refreshed_at = time.monotonic()
        self.record = ProcRecord(pid=pid, cores=cores_available(pid),
                                 cpu_quota_cores=cgroup_cpu_quota_cores(pid),
                                 started_at=time.time())
        self._named: set[int] = set()  # threads whose namespace id was read
        self.kernel: KernelWaitReader | None = None
        if kernel_waits:
            self.record.kernel = KernelRecord()
            self.kernel = KernelWaitReader(pid, self.record.kernel)

    def start(self) -> None:
        self._snapshot_counters(self.record.first)
        if self.gc is not None:
            self.gc.start()
        self.tick()

    def window_opened(self) -> None:
        if self.gc is not None:
            self.gc.window_opened()

    def alive(self) -> bool:
        return os.path.exists(f"/proc/{self.pid}/stat") and not self._is_zombie()

    def _is_zombie(self) -> bool:
        stat = read_proc_text(f"/proc/{self.pid}/stat")
        return stat is None or parse_stat(stat)[1] in ("Z", "X")

    def tick(self) -> bool:
        """Samples every thread's state once; False when the target is gone."""
        now = time.time() - self.record.started_at
        tids = list_tids(self.pid)
        if not tids:
            return False
        gil_holder = self.kernel.gil_holder() if self.kernel is not None else None
        for tid in tids:
            stat = read_proc_text(f"/proc/{self.pid}/task/{tid}/stat")
            if stat is None:
                continue
            comm, state, _ = parse_stat(stat)
            self.record.state_samples.append((round(now, 4), tid, state))
            if self.kernel is not None and state in ("S", "D"):
                self.kernel.observe(round(now, 4), tid)
            self.record.thread_names.setdefault(tid, comm)
            if tid not in self.record.first:
                counters = read_counters(self.pid, tid)
                if counters:
                    self.record.first[tid] = counters
            if tid not in self._named:
                self._named.add(tid)
                inner = namespace_tid(self.pid, tid)
                if inner is not None and inner != tid:
                    self.record.ns_tids[tid] = inner
        if self.kernel is not None and gil_holder is not None:
            self.kernel.note_gil_holder(round(now, 4), gil_holder)
        statm = read_proc_text(f"/proc/{self.pid}/statm")
        if statm:
            self.record.rss_samples.append((round(now, 4), int(statm.split()[1]) * _PAGE_SIZE))
        self._ticks += 1
        if time.monotonic() - self._refreshed_at >= self.COUNTER_REFRESH_S:
            self._snapshot_counters(self.record.last)
        return True

    def finish(self) -> ProcRecord:
        if self.kernel is not None:
            self.kernel.finish()
        if self.gc is not None:
            self.record.gc = self.gc.finish()
        if self.alive():
            self._snapshot_counters(self.record.last)
        else:
            self.record.target_exited = True
        self.record.ended_at = time.time()
        return self.record

    # The cpu.stat of the group whose quota binds: found at the first snapshot, then read again.
    _cgroup_located = False
    _cgroup_stat: str | None = None

    def _throttling(self) -> tuple[int, int, float] | None:
        """The cgroup's throttling counters now, or None with no CPU quota."""
        if not self._cgroup_located:
            self._cgroup_located = True
            reading = cpu_cgroup(self.pid)
            if reading is None or reading.quota_cores is None or reading.stat_file is None:
                return None
            self._cgroup_stat = reading.stat_file
            self.record.cpu_cgroup = f"v{reading.version}:{reading.limit_path}"
            return reading.throttling()
        return read_throttling(self._cgroup_stat) if self._cgroup_stat else None

    def _snapshot_counters(self, into: dict[int, ThreadCounters]) -> None:
        self._refreshed_at = time.monotonic()
        io = read_proc_text(f"/proc/{self.pid}/io")
        calls = {line.split(":", 1)[0]: int(line.split()[1]) for line in (io or "").splitlines()
                 if line.startswith(("syscr:", "syscw:", "rchar:", "read_bytes:"))}
        # first snapshot, then the latest one
        for key, counter in (("syscw", self.record.write_syscalls), ("syscr", self.record.read_syscalls),
                             ("rchar", self.record.read_chars), ("read_bytes", self.record.storage_reads)):
            if key in calls:
                counter[1 if counter else 0:] = [calls[key]]
        idle = machine_idle_seconds()
        if idle is not None:
            self.record.machine_idle_s[1 if self.record.machine_idle_s else 0:] = [idle]
        times = read_times(self.pid)
        if times is not None:
            self.record.process_cpu[1 if self.record.process_cpu else 0:] = [times.as_list()]
        throttling = self._throttling()
        if throttling is not None:
            self.record.cpu_throttling[1 if self.record.cpu_throttling else 0:] = [list(throttling)]
        for tid in list_tids(self.pid):
            counters = read_counters(self.pid, tid)
            if counters:
                into[tid] = counters


def kept_argv(cmdline: Iterable[object]) -> list[str]:
    """A process's command line as a TreeRecord holds it: its secrets masked (report/redact.py).
    The record is written as it is (`attach --keep-raw`, the .procfs.json) and its command lines
    reach the report (a child's, a server's); the analysis reads only program names and flags in
    them, which redaction keeps. Also on reading a record, so an older file's secrets go no
    further."""
    return redact_argv([str(part) for part in cmdline])


@dataclass
class TreeRecord:
    """The /proc records of every process sampled in one window (a process tree, or several)."""

    roots: list[int]
    records: dict[int, ProcRecord] = field(default_factory=dict)
    parents: dict[int, int | None] = field(default_factory=dict)
    cmdlines: dict[int, list[str]] = field(default_factory=dict)
    appeared_s: dict[int, float] = field(default_factory=dict)  # first seen, seconds into the window
    # What the kernel knows across processes (collect/kernel_waits.py): /proc/locks at each tick
    # a thread waited for a file lock (t, entries); each pipe a thread waited on -> the processes
    # holding it open and how ("r", "w", "rw"); each socket a thread waited on -> what it is.
    file_locks: list[tuple[float, list[FileLockEntry]]] = field(default_factory=list)
    pipes: dict[int, dict[int, str]] = field(default_factory=dict)
    sockets: dict[int, str] = field(default_factory=dict)
    # processes at a pipe's other end: pid -> (its parent, its command name)
    peers: dict[int, tuple[int, str]] = field(default_factory=dict)
    # a connected socket's peer ("tcp 127.0.0.1:5432", "unix /run/x.sock", as in `sockets`) ->
    # the local processes listening there (collect/sockets.py); empty: no local process does
    servers: dict[str, list[int]] = field(default_factory=dict)
    # those processes, read like the service's own but apart from it (no stacks): what serves
    # the service's waits, its CPU and its own waits; pid -> record, and its command line
    server_records: dict[int, ProcRecord] = field(default_factory=dict)
    server_cmdlines: dict[int, list[str]] = field(default_factory=dict)
    # roots that are peers `attach --follow-peers` added: processes the service's connections
    # lead to, sampled with it but not of it
    followed: list[int] = field(default_factory=list)
    # Descendants not sampled (not running Python: a shell, a converter the service starts): pid
    # -> [ppid, CPU at first sight, CPU at the window's end], each its own CPU plus its reaped
    # children's (ProcessTimes.own_s + reaped_s), None at first sight for a process that started
    # in the window (all its CPU is the window's) and at the end for one gone by then (its CPU
    # is in its parent's reaped children). Empty in older recordings.
    other_children: dict[int, list[float | None]] = field(default_factory=dict)
    # Their command lines, read at first sight (a short-lived child is gone by the window's end).
    other_cmdlines: dict[int, list[str]] = field(default_factory=dict)
    # The machine's fork counter (collect/forks.py) at the window's start and end: an upper
    # bound on the children started in it. Empty in older recordings.
    forks: list[int] = field(default_factory=list)
    # The CPU the machine's other processes used over the window, and the few that used most
    # (collect/neighbours.py): who held the cores. None in older recordings.
    neighbours: Neighbours | None = None

    def to_dict(self) -> dict:
        return {"roots": self.roots,
                "processes": [{"record": rec.to_dict(), "ppid": self.parents.get(pid),
                               "cmdline": self.cmdlines.get(pid, []),
                               "appeared_s": self.appeared_s.get(pid)}
                              for pid, rec in self.records.items()],
                "file_locks": [[t, [list(vars(e).values()) for e in entries]]
                               for t, entries in self.file_locks],
                "pipes": {str(k): {str(p): m for p, m in v.items()} for k, v in self.pipes.items()},
                "sockets": {str(k): v for k, v in self.sockets.items()},
                "peers": {str(k): list(v) for k, v in self.peers.items()},
                "servers": self.servers,
                "server_processes": [{"record": rec.to_dict(), "cmdline": self.server_cmdlines.get(pid, [])}
                                     for pid, rec in self.server_records.items()],
                "followed": self.followed,
                "other_children": {str(k): v for k, v in self.other_children.items()},
                "other_cmdlines": {str(k): v for k, v in self.other_cmdlines.items()},
                "forks": self.forks,
                "neighbours": self.neighbours.to_dict() if self.neighbours is not None else None}

    @classmethod
    def from_dict(cls, data: dict) -> "TreeRecord":
        """Reads both this shape and a single process's ProcRecord (older --keep-raw files)."""
        if "processes" not in data:
            rec = ProcRecord.from_dict(data)
            return cls(roots=[rec.pid], records={rec.pid: rec})
        tree = cls(roots=[int(p) for p in data.get("roots", [])])
        for entry in data["processes"]:
            rec = ProcRecord.from_dict(entry["record"])
            tree.records[rec.pid] = rec
            tree.parents[rec.pid] = entry.get("ppid")
            tree.cmdlines[rec.pid] = kept_argv(entry.get("cmdline") or [])
            if entry.get("appeared_s") is not None:
                tree.appeared_s[rec.pid] = float(entry["appeared_s"])
        tree.file_locks = [(float(t), [FileLockEntry(str(e[0]), str(e[1]), int(e[2]), str(e[3]),
                                                     bool(e[4])) for e in entries])
                           for t, entries in data.get("file_locks") or []]
        tree.pipes = {int(k): {int(p): str(m) for p, m in v.items()}
                      for k, v in (data.get("pipes") or {}).items()}
        tree.sockets = {int(k): str(v) for k, v in (data.get("sockets") or {}).items()}
        tree.peers = {int(k): (int(v[0]), str(v[1])) for k, v in (data.get("peers") or {}).items()}
        tree.servers = {str(k): [int(p) for p in v] for k, v in (data.get("servers") or {}).items()}
        for entry in data.get("server_processes") or []:
            rec = ProcRecord.from_dict(entry["record"])
            tree.server_records[rec.pid] = rec
            tree.server_cmdlines[rec.pid] = kept_argv(entry.get("cmdline") or [])
        tree.followed = [int(p) for p in data.get("followed") or []]
        tree.other_children = {int(k): [None if x is None else float(x) for x in v]
                               for k, v in (data.get("other_children") or {}).items()}
        tree.other_cmdlines = {int(k): kept_argv(v) for k, v in (data.get("other_cmdlines") or {}).items()}
        tree.forks = [int(n) for n in data.get("forks") or []]
        if data.get("neighbours"):
            tree.neighbours = Neighbours.from_dict(data["neighbours"])
        return tree

    @property
    def root_record(self) -> ProcRecord:
        return self.records[self.roots[0]]


class TreeSampler:
    """A ProcSampler per process: the named roots and, unless told not to, every descendant.
    Processes that start mid-window are picked up on the next rescan; ones that exit keep what
    was sampled until then."""

    RESCAN_S = 0.5  # children are looked for at most this often (a scan reads every /proc/<pid>)
    MAX_SERVERS = 8  # processes serving the service's sockets read beside it, at most

    def __init__(self, roots: list[int], children: bool = True,
                 include=None, kernel_waits: bool = True, gc_state: bool = True,
                 followed: tuple[int, ...] = ()):
        from diagnose.collect import tree  # psutil lives there; keeps this module importable alone
        self._tree = tree
        self.children = children
        self.kernel_waits = kernel_waits
        self.gc_state = gc_state
        # `include(pid) -> bool`: which descendants to sample (default: those running Python)
        self._include = include or tree.maps_python
        self.record = TreeRecord(roots=list(roots), followed=[p for p in followed if p in roots])
        self._samplers: dict[int, ProcSampler] = {}
        self._servers: dict[int, ProcSampler] = {}  # processes serving its sockets (server_records)
        self._rejected: set[int] = set()
        self._started = time.time()
        self._last_scan = -1e9
        self.new_pids: list[int] = []  # descendants found since the caller last cleared it
        self._neighbours = NeighbourScanner()  # the other processes' CPU, at start and finish
        self._gc_polls = GcPollThread()  # one thread polls every process's collector
        for pid in roots:
            self._add(pid, None)

    def _add(self, pid: int, ppid: int | None) -> None:
        sampler = ProcSampler(pid, kernel_waits=self.kernel_waits, gc_state=self.gc_state,
                              gc_polls=self._gc_polls)
        sampler.record.started_at = self._started
        self._samplers[pid] = sampler
        self.record.records[pid] = sampler.record
        info = self._tree.node(pid)
        self.record.parents[pid] = info.ppid if info else ppid
        self.record.cmdlines[pid] = kept_argv(info.cmdline) if info else []
        appeared = time.time() - self._started
        if appeared > 1.0:
            self.record.appeared_s[pid] = round(appeared, 3)

    def _rescan(self) -> list[int]:
        new: list[int] = []
        if not self.children:
            return new
        for root in self.record.roots:
            for pid in self._tree.descendants(root):
                if pid in self._samplers or pid in self._rejected:
                    continue
                if self._include(pid):
                    self._add(pid, None)
                    new.append(pid)
                    self.new_pids.append(pid)
                else:
                    self._rejected.add(pid)
                    self._first_sight(pid)
        return new

    def _first_sight(self, pid: int) -> None:
        """A descendant that is not sampled: its CPU when first seen (None after the first scan:
        it started in the window, so all of its CPU is the window's), for the CPU account."""
        times = read_times(pid)
        if times is None:
            return
        info = self._tree.node(pid)
        first = times.own_s + times.reaped_s if self._last_scan < 0 else None
        self.record.other_children[pid] = [float(info.ppid) if info and info.ppid else None,
                                            first, None]
        if info is not None and info.cmdline:
            self.record.other_cmdlines[pid] = kept_argv(info.cmdline)

    @property
    def pids(self) -> list[int]:
        return list(self._samplers)

    def thread_count(self) -> int:
        return sum(len(s.record.first) for s in self._samplers.values())

    def start(self) -> None:
        self._count_forks()
        self._rescan()
        self._last_scan = time.monotonic()
        for sampler in self._samplers.values():
            sampler.start()
        self._neighbours.start()

    def window_opened(self) -> None:
        """The window's clock started: the readers that count over a span start it now."""
        for sampler in self._samplers.values():
            sampler.window_opened()

    def tick(self) -> bool:
        """Samples every process once; False when every root is gone."""
        if time.monotonic() - self._last_scan >= self.RESCAN_S:
            self._last_scan = time.monotonic()
            for pid in self._rescan():
                self._samplers[pid].start()
        alive = {pid: sampler.tick() for pid, sampler in list(self._samplers.items())}
        for server in list(self._servers.values()):
            server.tick()
        self._read_file_locks()
        self._resolve_new_sockets()
        return any(alive.get(pid) for pid in self.record.roots)

    def _resolve_new_sockets(self) -> None:
        """What the sockets first waited on this tick are (a peer's address, a listener), read
        from the process's own network namespace now: a per-request connection is gone by the
        window's end. The processes serving a peer's address are read from then on (and what
        their own sockets wait on, in turn: a chain of services)."""
        for pid, sampler in [*self._samplers.items(), *self._servers.items()]:
            reader = sampler.kernel
            if reader is None or not reader.new_sockets:
                continue
            found = socket_table(pid, reader.new_sockets)
            self.record.sockets.update(found)
            reader.new_sockets = set()
            self._find_servers(pid, found.values())

    def _find_servers(self, pid: int, peers: Iterable[str], sample: bool = True) -> None:
        """The local processes listening where `pid`'s connections lead, once per address; each
        is sampled from now on (its CPU, its threads, its own waits), up to MAX_SERVERS."""
        for peer in peers:
            kind, _, address = peer.partition(" ")
            if kind not in ("tcp", "unix") or address == "(unnamed)" or peer in self.record.servers:
                continue
            pids = serving_pids(pid, address if kind == "tcp" else peer)
            self.record.servers[peer] = list(pids)
            for server in pids:
                if (not sample or server in self._samplers or server in self._servers
                        or len(self._servers) >= self.MAX_SERVERS):
                    continue
                # its own window, from now: its CPU is a rate over the span it was read
                sampler = ProcSampler(server, kernel_waits=self.kernel_waits)
                info = self._tree.node(server)
                self.record.server_cmdlines[server] = kept_argv(info.cmdline) if info else []
                self._servers[server] = sampler
                self.record.server_records[server] = sampler.record
                sampler.start()

    def _read_file_locks(self) -> None:
        """/proc/locks, at a tick where a thread waited for a file lock: its holder and queue."""
        readers = [s.kernel for s in self._samplers.values() if s.kernel is not None]
        if not any(r.saw_file_lock for r in readers):
            return
        ids = {fid for r in readers for fid in r.record.file_ids.values()}
        for reader in readers:
            reader.saw_file_lock = False
        entries = read_file_locks(ids)
        if entries:
            self.record.file_locks.append((round(time.time() - self._started, 4), entries))

    def roots_alive(self) -> bool:
        return any(self._samplers[pid].alive() for pid in self.record.roots)

    def _count_forks(self) -> None:
        started = processes_started()
        if started is not None:
            self.record.forks[1 if self.record.forks else 0:] = [started]

    def finish(self) -> TreeRecord:
        self._count_forks()
        # the service's processes (and their descendants) are not its neighbours, nor are the
        # servers read beside it: their CPU serves its requests (backend_saturated's)
        self.record.neighbours = self._neighbours.finish(
            [*self.record.roots, *self._samplers, *self._servers, *self.record.other_children])
        for sampler in [*self._samplers.values(), *self._servers.values()]:
            sampler.finish()
        for pid, entry in self.record.other_children.items():
            times = read_times(pid)
            entry[2] = None if times is None else times.own_s + times.reaped_s
        self._resolve_ends()
        return self.record

    def _resolve_ends(self) -> None:
        """The other ends of the pipes and sockets threads waited on, once, at the window's end."""
        pipes: set[int] = set()
        for pid, sampler in self._samplers.items():
            kernel = sampler.record.kernel
            if kernel is None:
                continue
            sockets: set[int] = set()
            for target in kernel.fds.values():
                if target.startswith("pipe:["):
                    pipes.add(int(target[6:-1]))
                elif target.startswith("socket:["):
                    sockets.add(int(target[8:-1]))
            found = socket_table(pid, sockets - set(self.record.sockets))
            self.record.sockets.update(found)
            self._find_servers(pid, found.values(), sample=False)  # the window is over
        if pipes:
            pids = sorted(set(self._samplers) | {p for root in self.record.roots
                                                 for p in self._tree.descendants(root)})
            self.record.pipes = pipe_ends(pids, pipes)
            # who the other ends are: a sidecar the service started is its child, and the
            # sidecar's own children inherit the pipe (a shell's `sleep`)
            for pid in sorted({p for ends in self.record.pipes.values() for p in ends}):
                if pid in self.record.peers:
                    continue
                stat = read_proc_text(f"/proc/{pid}/stat")
                if stat:
                    comm, _, _ = parse_stat(stat)
                    ppid = int(stat[stat.rindex(")") + 2:].split()[1])
                    self.record.peers[pid] = (ppid, comm)
