"""What the kernel says a blocked thread waits on, read from /proc without stopping the target.

For a thread that is not on a CPU, `/proc/PID/task/TID/syscall` gives the system call it sleeps
in and its arguments (a futex's address, a descriptor, a child's pid), `wchan` the kernel
function it sleeps in. The descriptors they name are resolved once per window: what
`/proc/PID/fd/N` points at (a file and its device:inode, a pipe or socket inode, an epoll
instance and the descriptors it watches), the descriptors a `poll` / `select` waits on (read
from the target's memory: nothing in it runs), and, when a thread waits for a file lock,
`/proc/locks` (who holds the lock, who queues behind it). None of this needs native frames,
depends on the CPython version, or cares which mount or pid namespace the target runs in.

Everything here is raw and serialisable (`KernelRecord`); model/kernel_waits.py decodes it.
"""

from __future__ import annotations

import os
import platform
import struct
from dataclasses import dataclass, field

from diagnose.collect.gil_state import UNKNOWN as GIL_UNKNOWN
from diagnose.collect.gil_state import GilStateReader
from diagnose.samples.native_libraries import LIBRARIES as POOL_LIBRARIES

# Syscall numbers by machine (asm/unistd_64.h, asm-generic/unistd.h): only those decoded.
SYSCALLS: dict[str, dict[int, str]] = {
    "x86_64": {0: "read", 7: "poll", 23: "select", 45: "recvfrom", 47: "recvmsg", 43: "accept",
               288: "accept4", 61: "wait4", 247: "waitid", 202: "futex", 73: "flock",
               72: "fcntl", 35: "nanosleep", 230: "clock_nanosleep", 232: "epoll_wait",
               281: "epoll_pwait", 441: "epoll_pwait2", 271: "ppoll", 270: "pselect6",
               17: "pread64", 19: "readv", 1: "write", 44: "sendto", 46: "sendmsg",
               42: "connect", 34: "pause", 130: "rt_sigsuspend", 128: "rt_sigtimedwait",
               449: "futex_waitv", 24: "sched_yield", 219: "restart_syscall"},
    "aarch64": {63: "read", 73: "ppoll", 72: "pselect6", 207: "recvfrom", 212: "recvmsg",
                202: "accept", 242: "accept4", 260: "wait4", 95: "waitid", 98: "futex",
                32: "flock", 25: "fcntl", 101: "nanosleep", 115: "clock_nanosleep",
                22: "epoll_pwait", 441: "epoll_pwait2", 67: "pread64", 65: "readv",
                64: "write", 206: "sendto", 211: "sendmsg", 203: "connect",
                133: "rt_sigsuspend", 137: "rt_sigtimedwait", 449: "futex_waitv",
                124: "sched_yield", 128: "restart_syscall"},
}
MACHINE = platform.machine()
# Calls whose first argument is a descriptor worth resolving.
FD_CALLS = frozenset({"read", "recvfrom", "recvmsg", "accept", "accept4", "flock", "fcntl",
                      "epoll_wait", "epoll_pwait", "epoll_pwait2", "pread64", "readv", "write",
                      "sendto", "sendmsg", "connect"})
FILE_LOCK_CALLS = frozenset({"flock", "fcntl"})
POLL_CALLS = frozenset({"poll", "ppoll"})
SELECT_CALLS = frozenset({"select", "pselect6"})
RUNNING = -1  # the syscall file says "running": the thread was on a CPU when read
MAX_POLLED_FDS = 64  # a poll over more descriptors is read as its first ones
# A poll or select over at most this many descriptors is read again at every observation: a
# blocking client with a timeout polls its one socket from the same stack slot for every
# request, so the slot names a new connection (maybe a new descriptor) each time, and one read
# of a connection that closed before its peer was looked up would otherwise stand for all.
# A larger set is an event loop's, read once.
REREAD_POLLED_FDS = 8


@dataclass(frozen=True)
class SyscallReading:
    """One thread's syscall file: the call's number (RUNNING when on a CPU) and its first three
    arguments."""

    nr: int
    args: tuple[int, int, int]


def parse_syscall(text: str) -> SyscallReading | None:
    """`202 0x55b1f5f7a6f0 0x189 0x0 ...` -> SyscallReading; "running" -> nr RUNNING; None for
    anything else (a kernel thread's `-1 ...`, an empty read)."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("running"):
        return SyscallReading(RUNNING, (0, 0, 0))
    parts = text.split()
    try:
        nr = int(parts[0])
        if nr < 0:
            return None
        args = tuple(int(p, 16) for p in parts[1:4])
    except ValueError:
        return None
    padded = (args + (0, 0, 0))[:3]
    return SyscallReading(nr, (padded[0], padded[1], padded[2]))


def syscall_name(nr: int, machine: str = MACHINE) -> str:
    return SYSCALLS.get(machine, {}).get(nr, f"syscall {nr}")


@dataclass
class KernelRecord:
    """Per process: every blocked thread's syscall over the window, and what its descriptors are.

    `observations`: (t, tid, nr, arg0, arg1, arg2, wchan) per /proc tick for each thread not in
    state R; `wchan` only where the call is not one the decoder names. `fds`: descriptor ->
    readlink of /proc/PID/fd/N ("pipe:[4629]", "socket:[88]", "/tmp/x", "anon_inode:[eventpoll]");
    `file_ids`: descriptor -> "MAJ:MIN:INODE" as /proc/locks writes it (hex device numbers);
    `watched`: an epoll descriptor, or a poll/select call's (tid, arg0) key, -> the descriptors it
    waits on; `writers`: pipe inodes this process holds open for writing."""

    machine: str = MACHINE
    observations: list[tuple[float, int, int, int, int, int, str]] = field(default_factory=list)
    fds: dict[int, str] = field(default_factory=dict)
    file_ids: dict[int, str] = field(default_factory=dict)
    watched: dict[str, list[int]] = field(default_factory=dict)
    # The interpreter's runtime state in this process ([start, end) of _PyRuntime): a futex in
    # it is the GIL's (or another interpreter-wide lock's). None when not found.
    runtime_range: tuple[int, int] | None = None
    # futex addresses inside a mapping of an intra-op pool's library (OpenBLAS, OpenMP, ...):
    # that library's own synchronisation (its pool's barrier, its callers' queue), which the
    # pool's size knob governs, not a lock the service's code takes. Address -> library file.
    pool_futexes: dict[int, str] = field(default_factory=dict)
    # every socket inode a descriptor named over the window, oldest first: a client's
    # per-request connections reuse the number, and one that closed before it was looked up
    # is named by an earlier one's peer
    fd_sockets: dict[int, list[int]] = field(default_factory=dict)
    # (t, tid) per tick: who held the GIL by the interpreter's own state (collect/gil_state.py),
    # 0 where nobody did; ticks whose two reads disagreed are left out
    gil_holders: list[tuple[float, int]] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"machine": self.machine, "observations": self.observations,
                "fds": {str(k): v for k, v in self.fds.items()},
                "file_ids": {str(k): v for k, v in self.file_ids.items()},
                "watched": self.watched,
                "runtime_range": list(self.runtime_range) if self.runtime_range else None,
                "pool_futexes": {str(k): v for k, v in self.pool_futexes.items()},
                "fd_sockets": {str(k): v for k, v in self.fd_sockets.items()},
                "gil_holders": self.gil_holders}

    @classmethod
    def from_dict(cls, data: dict) -> KernelRecord:
        rng = data.get("runtime_range")
        return cls(machine=str(data.get("machine") or MACHINE),
                   observations=[tuple(o) for o in data.get("observations", [])],
                   fds={int(k): str(v) for k, v in (data.get("fds") or {}).items()},
                   file_ids={int(k): str(v) for k, v in (data.get("file_ids") or {}).items()},
                   watched={str(k): [int(x) for x in v] for k, v in (data.get("watched") or {}).items()},
                   runtime_range=(int(rng[0]), int(rng[1])) if rng else None,
                   pool_futexes={int(k): str(v) for k, v in (data.get("pool_futexes") or {}).items()},
                   fd_sockets={int(k): [int(x) for x in v]
                               for k, v in (data.get("fd_sockets") or {}).items()},
                   gil_holders=[(float(t), int(tid)) for t, tid in data.get("gil_holders") or []])


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


class KernelWaitReader:
    """Reads the syscall of each blocked thread of one process, tick after tick, and resolves
    the descriptors the calls name the first time each is seen (a window is seconds long: a
    descriptor number rarely changes its meaning within one)."""

    def __init__(self, pid: int, record: KernelRecord):
        self.pid = pid
        self.record = record
        self._names = SYSCALLS.get(record.machine, {})
        self._memory = None  # opened on the first poll/select seen
        self.saw_file_lock = False  # this tick: a thread waits for a file lock
        # sockets first seen this tick, resolved (peer, listening) before they close: a client
        # opens one per request (TreeSampler._resolve_new_sockets)
        self.new_sockets: set[int] = set()
        self._gil: GilStateReader | None = None
        self._gil_opened = False
        self._saw_futex = False

    def gil_holder(self) -> int:
        """Who holds the GIL now (collect/gil_state.py): read at a tick's start, and again at its
        end by `note_gil_holder`. The reader opens at the first tick after a futex wait was seen:
        a process whose threads never sleep on a futex has no GIL queue to explain."""
        if not self._gil_opened and self._saw_futex:
            self._gil_opened = True
            self._gil = GilStateReader.open(self.pid)
        return self._gil.holder() if self._gil is not None else GIL_UNKNOWN

    def note_gil_holder(self, t: float, before: int) -> None:
        """Records the tick's holder where its two reads agree: the kernel's readings between
        them then saw that thread, not one the GIL passed to mid-tick."""
        if self._gil is None or before == GIL_UNKNOWN:
            return
        if self._gil.holder() == before:
            self.record.gil_holders.append((t, before))

    def observe(self, t: float, tid: int) -> None:
        """One blocked thread's syscall at tick `t` (seconds on the /proc clock)."""
        text = _read(f"/proc/{self.pid}/task/{tid}/syscall")
        reading = parse_syscall(text) if text else None
        if reading is None:
            return
        name = self._names.get(reading.nr, "") if reading.nr != RUNNING else ""
        wchan = ""
        # restart_syscall: a sleep resumed after a stop (py-spy's own); only wchan says in what
        if reading.nr != RUNNING and (not name or name == "restart_syscall"):
            wchan = (_read(f"/proc/{self.pid}/task/{tid}/wchan") or "").strip()
        a0, a1, a2 = reading.args
        if name == "futex":
            self._saw_futex = True
        self.record.observations.append((t, tid, reading.nr, a0, a1, a2, wchan))
        if name in FD_CALLS:
            self._resolve_fd(a0)
            if name in FILE_LOCK_CALLS:
                self.saw_file_lock = True
            if name.startswith("epoll"):
                self._resolve_epoll(a0)
        elif name in POLL_CALLS:
            self._resolve_poll(tid, a0, a1)
        elif name in SELECT_CALLS:
            self._resolve_select(tid, a0, a1)

    def _resolve_fd(self, fd: int) -> None:
        # A socket's descriptor is read again each time: a client opens one per request, and
        # the number comes back for the next connection (another inode, maybe another peer).
        known = self.record.fds.get(fd)
        if (known is not None and not known.startswith("socket:")) or fd > 1 << 20:
            return
        path = f"/proc/{self.pid}/fd/{fd}"
        try:
            target = os.readlink(path)
        except OSError:
            return
        if target == known:
            return
        self.record.fds[fd] = target
        if target.startswith("socket:["):
            inode = int(target[8:-1])
            self.new_sockets.add(inode)
            self.record.fd_sockets.setdefault(fd, []).append(inode)
        if target.startswith("/"):
            try:
                st = os.stat(path)
            except OSError:
                return
            self.record.file_ids[fd] = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"

    def _resolve_epoll(self, epfd: int) -> None:
        key = f"epoll:{epfd}"
        if key in self.record.watched:
            return
        info = _read(f"/proc/{self.pid}/fdinfo/{epfd}") or ""
        fds = []
        for line in info.splitlines():
            if line.startswith("tfd:"):
                try:
                    fds.append(int(line.split()[1]))
                except (IndexError, ValueError):
                    continue
        self.record.watched[key] = fds[:MAX_POLLED_FDS]
        for fd in fds[:MAX_POLLED_FDS]:
            self._resolve_fd(fd)

    def _memory_reader(self):
        if self._memory is None:
            from diagnose.collect.asyncio_tasks.remote import RemoteMemory, RemoteReadError
            try:
                self._memory = RemoteMemory(self.pid)
            except RemoteReadError:
                self._memory = False
        return self._memory or None

    def _resolve_poll(self, tid: int, fds_ptr: int, nfds: int) -> None:
        key = f"poll:{tid}:{fds_ptr:#x}"
        if not 0 < nfds <= 4096 or (key in self.record.watched and nfds > REREAD_POLLED_FDS):
            return
        memory = self._memory_reader()
        fds: list[int] = []
        if memory is not None:
            from diagnose.collect.asyncio_tasks.remote import RemoteReadError
            count = min(nfds, MAX_POLLED_FDS)
            try:
                data = memory.read(fds_ptr, 8 * count)
                fds = [struct.unpack_from("<i", data, 8 * i)[0] for i in range(count)]
            except RemoteReadError:
                fds = []
        if fds or key not in self.record.watched:
            self.record.watched[key] = [fd for fd in fds if fd >= 0]
        for fd in self.record.watched[key]:
            self._resolve_fd(fd)

    def _resolve_select(self, tid: int, nfds: int, readfds_ptr: int) -> None:
        key = f"select:{tid}:{readfds_ptr:#x}"
        if not 0 < nfds <= 4096 or not readfds_ptr or (
                key in self.record.watched and len(self.record.watched[key]) > REREAD_POLLED_FDS):
            return
        memory = self._memory_reader()
        fds: list[int] = []
        if memory is not None:
            from diagnose.collect.asyncio_tasks.remote import RemoteReadError
            try:
                data = memory.read(readfds_ptr, (nfds + 7) // 8)
                fds = [fd for fd in range(nfds) if data[fd // 8] >> (fd % 8) & 1]
            except RemoteReadError:
                fds = []
        if fds or key not in self.record.watched:
            self.record.watched[key] = fds[:MAX_POLLED_FDS]
        for fd in self.record.watched[key]:
            self._resolve_fd(fd)

    def finish(self) -> None:
        """Locates the interpreter's runtime state (for the GIL's futex) and closes what was
        opened. The symbol lookup is cached per file: the asyncio task reader usually made it."""
        if self._memory:
            self._memory.close()
        self._memory = None
        if self._gil is not None:
            self._gil.close()
            self._gil = None
        if self.record.runtime_range is None and any(
                self._names.get(o[2]) == "futex" for o in self.record.observations):
            self.record.runtime_range = runtime_range(self.pid)
        futexes = {o[3] for o in self.record.observations if self._names.get(o[2]) == "futex"}
        if futexes:
            self.record.pool_futexes = pool_library_addresses(self.pid, futexes)


def pool_library_addresses(pid: int, addresses: set[int]) -> dict[int, str]:
    """The `addresses` that lie in a file mapping of an intra-op pool's library (/proc/PID/maps),
    with that file's path. A Python lock lives in the heap; OpenBLAS's queue lives in OpenBLAS."""
    text = _read(f"/proc/{pid}/maps")
    if not text:
        return {}
    ranges: list[tuple[int, int, str]] = []
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not any(p.search(parts[5]) for _, p, _ in POOL_LIBRARIES):
            continue
        start, _, end = parts[0].partition("-")
        ranges.append((int(start, 16), int(end, 16), parts[5].strip()))
    return {address: path for address in sorted(addresses)
            for start, end, path in ranges if start <= address < end}


def runtime_range(pid: int) -> tuple[int, int] | None:
    """[start, end) of `_PyRuntime` in the target, or None when it cannot be found."""
    try:
        from diagnose.collect.asyncio_tasks.binary import InterpreterNotFound, find_interpreter
    except ImportError:  # pyelftools missing: no GIL address, futexes stay plain locks
        return None
    try:
        interpreter = find_interpreter(pid)
    except (InterpreterNotFound, OSError):
        return None
    if not interpreter.runtime_size:
        return None
    return interpreter.runtime_address, interpreter.runtime_address + interpreter.runtime_size


@dataclass(frozen=True)
class FileLockEntry:
    """One line of /proc/locks: a lock held (`waiting` False) or a waiter queued behind it."""

    kind: str  # FLOCK, POSIX, OFDLCK
    mode: str  # READ, WRITE
    pid: int
    file_id: str  # MAJ:MIN:INODE
    waiting: bool


def parse_locks(text: str) -> list[FileLockEntry]:
    """`1: FLOCK  ADVISORY  WRITE 22570 fe:00:2146346 0 EOF` (held) and
    `1: -> FLOCK  ADVISORY  WRITE 22615 fe:00:2146346 0 EOF` (a waiter)."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 6:
            continue
        waiting = parts[1] == "->"
        rest = parts[2:] if waiting else parts[1:]
        if len(rest) < 5:
            continue
        try:
            pid = int(rest[3])
        except ValueError:
            continue
        out.append(FileLockEntry(rest[0], rest[2], pid, rest[4], waiting))
    return out


def read_file_locks(file_ids: set[str]) -> list[FileLockEntry]:
    """The /proc/locks entries of the files named (the whole table can be long on a busy host)."""
    text = _read_all("/proc/locks")
    if not text:
        return []
    return [e for e in parse_locks(text) if e.file_id in file_ids]


def _read_all(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace")
    except OSError:
        return None


def pipe_ends(pids: list[int], inodes: set[int]) -> dict[int, dict[int, str]]:
    """For each pipe inode, the processes holding it open and how ("r", "w" or "rw"): who is at
    the other end of a pipe a thread reads. Read once at the window's end."""
    found: dict[int, dict[int, str]] = {}
    if not inodes:
        return found
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            if not target.startswith("pipe:["):
                continue
            inode = int(target[6:-1])
            if inode not in inodes:
                continue
            info = _read(f"/proc/{pid}/fdinfo/{name}") or ""
            flags = next((int(line.split()[1], 8) for line in info.splitlines()
                          if line.startswith("flags:")), 0)
            mode = {0: "r", 1: "w", 2: "rw"}.get(flags & 3, "r")
            have = found.setdefault(inode, {}).get(pid, "")
            found[inode][pid] = "".join(sorted(set(have + mode)), )
    return found
