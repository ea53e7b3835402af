"""The kernel's record of what each blocked thread waited on, decoded into wait objects.

collect/kernel_waits.py keeps, per /proc tick, each sleeping thread's syscall and its first
arguments. Here each observation becomes a `WaitObject`: the GIL (a futex inside the
interpreter's runtime state), a lock (any other futex: threads waiting on one address wait on
one lock), a file lock (its path, and from /proc/locks who holds it), a pipe (and the processes
at its other end), a socket (a connected one: a call outside the process; a listening one:
waiting for work), a child process, a timer. `KernelView` holds a process's observations by
thread, in time order, for the sample table (model/os_state.settle_with_kernel) and the
wait-for graph (model/wait_graph.py).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from diagnose.collect.kernel_waits import FILE_LOCK_CALLS, RUNNING, SYSCALLS, KernelRecord
from diagnose.collect.procfs import ProcRecord, TreeRecord
from diagnose.vocab import ResourceKind, ThreadRole, WaitKind

if TYPE_CHECKING:  # the OS summary is read here (lock_knot), built elsewhere
    from diagnose.model.os_summary import ProcessOS

# futex(2) operations that sleep (the low bits; FUTEX_PRIVATE_FLAG 128 and
# FUTEX_CLOCK_REALTIME 256 stripped): WAIT, LOCK_PI, WAIT_BITSET, WAIT_REQUEUE_PI, LOCK_PI2.
FUTEX_WAITS = frozenset({0, 6, 9, 11, 13})
FUTEX_PRIVATE = 128
F_SETLKW = frozenset({7, 14, 38})  # F_SETLKW, F_SETLKW64 (32-bit), F_OFD_SETLKW
READS = frozenset({"read", "readv", "pread64", "recvfrom", "recvmsg"})
WRITES = frozenset({"write", "sendto", "sendmsg", "connect"})
POLLS = frozenset({"poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait",
                   "epoll_pwait2"})
SLEEPS = frozenset({"nanosleep", "clock_nanosleep", "pause", "rt_sigsuspend", "rt_sigtimedwait"})
CHILD_WAITS = frozenset({"wait4", "waitid"})


class Blocking(enum.StrEnum):
    """How a wait object holds a thread up, for the sample table's states."""

    RUNNING = "running"    # on a CPU
    GIL = "gil"            # runnable, waiting for the GIL
    HELD = "held"          # a lock another thread or process holds
    OUTSIDE = "outside"    # a call outside the thread: IO, a pipe, a socket, a child, a timer
    IDLE = "idle"          # waiting for work (a listening socket)
    POOL = "pool"          # an intra-op pool's own synchronisation: the frames' reading stands


@dataclass(frozen=True)
class WaitObject:
    """What one observation waited on. `key` identifies it across the service's processes
    (two threads with one key wait on the same thing); `label` says it in words; `holders`:
    pids the kernel names as holding or serving it (a file lock's holder, a pipe's writer)."""

    resource: ResourceKind | None  # None: running
    key: str
    label: str
    blocking: Blocking
    syscall: str = ""
    holders: tuple[int, ...] = ()
    # of the readings that listed the object, the share in which each holder held it (file
    # locks, from /proc/locks); empty where the kernel names a holder without a share
    holder_shares: tuple[float, ...] = ()
    # a connection this process opened to a listener (a socket's client side): waiting on it is
    # waiting on the peer, never for work; False for a connection it accepted
    outbound: bool = False


RUNNING_OBJECT = WaitObject(None, "running", "on a CPU", Blocking.RUNNING)


@dataclass(frozen=True)
class ThreadWaits:
    """One thread's kernel observations over the window: each object and how often."""

    tid: int
    observations: int  # ticks at which the thread slept and its syscall was read
    objects: tuple[tuple[WaitObject, int], ...]  # most observed first

    def share(self, key: str) -> float:
        return sum(n for o, n in self.objects if o.key == key) / max(1, self.observations)

    @property
    def top(self) -> WaitObject | None:
        return self.objects[0][0] if self.objects else None


@dataclass(frozen=True)
class KernelView:
    """A process's kernel observations: per thread, the instants (seconds on the /proc clock)
    and the index into `objects` of what it waited on then."""

    pid: int
    objects: tuple[WaitObject, ...]
    times: Mapping[int, np.ndarray] = field(default_factory=dict)
    indices: Mapping[int, np.ndarray] = field(default_factory=dict)
    threads: Mapping[int, ThreadWaits] = field(default_factory=dict)
    # state-letter ticks per thread (the /proc sampler's, observer stops excluded), so a share
    # of "blocked on X" is of all the thread's ticks, running ones included
    ticks: Mapping[int, int] = field(default_factory=dict)
    # the interpreter's runtime state was located: a GIL wait would have been named as one
    knows_gil: bool = False
    # tick instant -> the GIL's holder then, by the interpreter's own state (0: nobody held it);
    # empty where it was not read (collect/gil_state.py)
    gil_holders: Mapping[float, int] = field(default_factory=dict)

    @property
    def observations(self) -> int:
        return sum(t.observations for t in self.threads.values())

    def shares(self, tid: int) -> list[tuple[WaitObject, float]]:
        """Each object the thread was seen on, with its share of the thread's /proc ticks
        (running ones included); [] for a thread the kernel did not see."""
        waits = self.threads.get(tid)
        if waits is None:
            return []
        seen = max(1, self.ticks.get(tid, waits.observations))
        return [(obj, n / seen) for obj, n in waits.objects]

    def blocked_share(self, tid: int, blocking: Blocking) -> float:
        """The share of the thread's /proc ticks the kernel saw it blocked this way."""
        return sum(share for obj, share in self.shares(tid) if obj.blocking == blocking)


def kernel_view(record: ProcRecord | None, tree: TreeRecord | None = None) -> KernelView | None:
    """The decoded observations of one process; None when the reader did not run."""
    if record is None or record.kernel is None:
        return None
    kernel = record.kernel
    decoder = _Decoder(record.pid, kernel, tree)
    objects: dict[WaitObject, int] = {}
    times: dict[int, list[float]] = {}
    indices: dict[int, list[int]] = {}
    for t, tid, nr, a0, a1, a2, wchan in kernel.observations:
        obj = decoder.decode(int(tid), int(nr), int(a0), int(a1), int(a2), str(wchan))
        index = objects.setdefault(obj, len(objects))
        times.setdefault(int(tid), []).append(float(t))
        indices.setdefault(int(tid), []).append(index)
    # The ticks that saw the thread on a CPU date its running spells (no syscall is read then).
    running = objects.setdefault(RUNNING_OBJECT, len(objects))
    for t, tid, state in record.state_samples:
        if state == "R":
            times.setdefault(int(tid), []).append(float(t))
            indices.setdefault(int(tid), []).append(running)
    ordered = tuple(objects)
    threads = {}
    for tid, idx in indices.items():
        counts = Counter(idx)
        threads[tid] = ThreadWaits(tid, len(idx), tuple((ordered[i], n) for i, n in counts.most_common()))
    ticks = Counter(int(tid) for _, tid, state in record.state_samples if state not in ("t", "T"))
    return KernelView(record.pid, ordered,
                      {tid: np.asarray(v, dtype=np.float64) for tid, v in times.items()},
                      {tid: np.asarray(v, dtype=np.int32) for tid, v in indices.items()},
                      threads, dict(ticks), kernel.runtime_range is not None,
                      {float(t): int(tid) for t, tid in kernel.gil_holders})


class _Decoder:
    def __init__(self, pid: int, kernel: KernelRecord, tree: TreeRecord | None):
        self.pid = pid
        self.kernel = kernel
        self.tree = tree
        self.names = SYSCALLS.get(kernel.machine, {})
        self._holders = _file_lock_holders(tree)
        self._holder_shares: dict[str, dict[int, float]] = {}
        self._children = sorted(p for p, parent in (tree.parents.items() if tree else ())
                                if parent == pid)

    def decode(self, tid: int, nr: int, a0: int, a1: int, a2: int, wchan: str) -> WaitObject:
        if nr == RUNNING:
            return RUNNING_OBJECT
        name = self.names.get(nr, "")
        if name == "futex":
            return self._futex(a0, a1)
        if name in FILE_LOCK_CALLS and (name == "flock" or a1 in F_SETLKW):
            return self._file_lock(a0, name)
        if name in READS or name in WRITES:
            return self._descriptor(a0, name)
        if name in ("accept", "accept4"):
            target = self._socket_of(a0)
            return WaitObject(ResourceKind.LISTEN, f"listen:{self.pid}:{a0}",
                              f"accept on {target or f'descriptor {a0}'}", Blocking.IDLE, name)
        if name in POLLS:
            return self._poll(tid, a0, a1, name)
        if name in CHILD_WAITS:
            return WaitObject(ResourceKind.CHILD, f"child:{self.pid}",
                              "a child process", Blocking.OUTSIDE, name, tuple(self._children))
        if name == "restart_syscall":
            return self._resumed(tid, wchan)
        if name in SLEEPS:
            return WaitObject(ResourceKind.SLEEP, "sleep", "a timer or signal", Blocking.OUTSIDE, name)
        return WaitObject(ResourceKind.OTHER, f"other:{name or wchan or nr}",
                          f"{name or f'syscall {nr}'}{f' in {wchan}' if wchan else ''}",
                          Blocking.OUTSIDE, name or str(nr))

    def _resumed(self, tid: int, wchan: str) -> WaitObject:
        """A wait the kernel resumed after a stop (restart_syscall): its arguments are gone, so
        only the kernel function it sleeps in says what it was."""
        if "nanosleep" in wchan:
            return WaitObject(ResourceKind.SLEEP, "sleep", "a timer or signal", Blocking.OUTSIDE,
                              "restart_syscall")
        if "poll" in wchan or "select" in wchan:
            return WaitObject(ResourceKind.POLL, f"poll:{self.pid}:{tid}", f"a resumed poll ({wchan})",
                              Blocking.OUTSIDE, "restart_syscall")
        return WaitObject(ResourceKind.OTHER, f"other:{wchan or 'restart_syscall'}",
                          f"a resumed wait{f' in {wchan}' if wchan else ''}", Blocking.OUTSIDE,
                          "restart_syscall")

    def _futex(self, address: int, op: int) -> WaitObject:
        if op & 0x7F not in FUTEX_WAITS:
            return WaitObject(ResourceKind.OTHER, "other:futex-wake", "futex", Blocking.OUTSIDE, "futex")
        runtime = self.kernel.runtime_range
        if runtime is not None and runtime[0] <= address < runtime[1]:
            return WaitObject(ResourceKind.GIL, f"gil:{self.pid}", "the GIL", Blocking.GIL, "futex")
        library = self.kernel.pool_futexes.get(address)
        if library is not None:
            name = library.rsplit("/", 1)[-1]
            return WaitObject(ResourceKind.OTHER, f"pool:{self.pid}:{name}",
                              f"{name}'s own pool synchronisation", Blocking.POOL, "futex")
        if op & FUTEX_PRIVATE:
            return WaitObject(ResourceKind.LOCK, f"futex:{self.pid}:{address:#x}",
                              f"lock at {address:#x}", Blocking.HELD, "futex")
        # a shared futex (a multiprocessing lock or semaphore in shared memory): its address is
        # the same in processes that inherited the mapping
        return WaitObject(ResourceKind.LOCK, f"futex:shared:{address:#x}",
                          f"shared lock at {address:#x}", Blocking.HELD, "futex")

    def _file_lock(self, fd: int, call: str) -> WaitObject:
        file_id = self.kernel.file_ids.get(fd, "")
        path = self.kernel.fds.get(fd, f"descriptor {fd}")
        holders = tuple(p for p in self._holders.get(file_id, ()) if p != self.pid)
        shares = self._holder_shares.setdefault(file_id, holder_shares(self.tree, file_id))
        return WaitObject(ResourceKind.FILE_LOCK, f"file:{file_id or f'{self.pid}:{fd}'}",
                          f"file lock on {path}", Blocking.HELD, call, holders,
                          tuple(round(shares.get(p, 0.0), 4) for p in holders))

    def _socket_of(self, fd: int) -> str:
        target = self.kernel.fds.get(fd, "")
        if target.startswith("socket:[") and self.tree is not None:
            return self.tree.sockets.get(int(target[8:-1]), "socket")
        return target

    def _descriptor(self, fd: int, call: str) -> WaitObject:
        target = self.kernel.fds.get(fd, "")
        if target.startswith("pipe:["):
            inode = int(target[6:-1])
            ends = (self.tree.pipes.get(inode, {}) if self.tree is not None else {})
            want = "w" if call in READS else "r"
            others = tuple(sorted(p for p, mode in ends.items() if want in mode and p != self.pid))
            peers = self.tree.peers if self.tree is not None else {}
            # a sidecar this process started, not the children it started in turn (a shell's
            # `sleep` inherits the pipe too)
            own = tuple(p for p in others if peers.get(p, (0, ""))[0] == self.pid)
            others = own or others
            names = ", ".join(f"{peers[p][1]} {p}" if p in peers else f"pid {p}" for p in others[:3])
            return WaitObject(ResourceKind.PIPE, f"pipe:{inode}",
                              f"pipe {inode}" + (f" (other end: {names})" if others else ""),
                              Blocking.OUTSIDE, call, others)
        if target.startswith("socket:["):
            inode = int(target[8:-1])
            sockets = self.tree.sockets if self.tree is not None else {}
            # the newest connection on this descriptor that was looked up before it closed
            seen = [inode, *reversed(self.kernel.fd_sockets.get(fd, []))]
            inode = next((i for i in seen if i in sockets), inode)
            what = sockets.get(inode, "")
            if what.startswith("listen"):
                return WaitObject(ResourceKind.LISTEN, f"listen:{inode}", what, Blocking.IDLE, call)
            peer = what.split(" ", 1)[1] if " " in what else ""
            if what.startswith("accepted "):  # the server's end: its client's next request
                return WaitObject(ResourceKind.SOCKET, f"socket:{peer}", f"connection from {peer}",
                                  Blocking.OUTSIDE, call)
            # the local processes listening where it leads (collect/sockets.py): its servers
            servers = tuple(p for p in (self.tree.servers.get(what, ()) if self.tree is not None else ())
                            if p != self.pid)
            return WaitObject(ResourceKind.SOCKET, f"socket:{peer or inode}",
                              f"socket to {peer}" if peer else f"socket {inode}", Blocking.OUTSIDE, call,
                              servers, outbound=bool(peer) and peer != "(unnamed)")
        return WaitObject(ResourceKind.OTHER, f"io:{target or fd}", f"{call} on {target or f'descriptor {fd}'}",
                          Blocking.OUTSIDE, call)

    def _poll(self, tid: int, a0: int, a1: int, call: str) -> WaitObject:
        if call.startswith("epoll"):
            fds = self.kernel.watched.get(f"epoll:{a0}", [])
        elif call in ("poll", "ppoll"):
            fds = self.kernel.watched.get(f"poll:{tid}:{a0:#x}", [])
        else:
            fds = self.kernel.watched.get(f"select:{tid}:{a1:#x}", [])
        decoded = [self._descriptor(fd, "read") for fd in fds]
        # What the poll stands for: work arriving (a listening socket) before a pipe before a
        # connected socket; a loop that also watches its own wake-up pipe is a server's loop.
        # The descriptor's wait as a read of it would be, side included: a poll on a connection
        # this process opened waits on its peer as a recv on it does (Python's socket timeouts
        # poll before each recv).
        for kind in (ResourceKind.LISTEN, ResourceKind.PIPE, ResourceKind.SOCKET):
            match = [d for d in decoded if d.resource == kind]
            if match:
                return replace(match[0], syscall=call)
        return WaitObject(ResourceKind.POLL, f"poll:{self.pid}:{tid}", f"{call} on {len(fds)} descriptors",
                          Blocking.OUTSIDE, call)


def _file_lock_holders(tree: TreeRecord | None) -> dict[str, tuple[int, ...]]:
    """file id -> the pids /proc/locks showed holding it, most often first."""
    if tree is None or not tree.file_locks:
        return {}
    held: dict[str, Counter[int]] = {}
    for _, entries in tree.file_locks:
        for entry in entries:
            if not entry.waiting:
                held.setdefault(entry.file_id, Counter())[entry.pid] += 1
    return {fid: tuple(p for p, _ in c.most_common()) for fid, c in held.items()}


def holder_shares(tree: TreeRecord | None, file_id: str) -> dict[int, float]:
    """Of the /proc/locks readings that listed `file_id`, the share in which each pid held it."""
    if tree is None:
        return {}
    readings = [entries for _, entries in tree.file_locks
                if any(e.file_id == file_id for e in entries)]
    counts: Counter[int] = Counter()
    for entries in readings:
        for pid in {e.pid for e in entries if e.file_id == file_id and not e.waiting}:
            counts[pid] += 1
    return {pid: n / len(readings) for pid, n in counts.items()} if readings else {}


# A knot: threads blocked on locks in this share of their ticks, with no tick on a CPU...
KNOT_BLOCKED_SHARE = 0.95
KNOT_MIN_TICKS = 8
# ...in a process that used next to no CPU over the window (cores).
KNOT_MAX_PROCESS_CORES = 0.05


@dataclass(frozen=True)
class LockKnot:
    """Threads of one process blocked all window on locks (futexes) while none of its threads
    ran: nothing will release them. `locks`: the futex keys they wait on."""

    pid: int
    tids: tuple[int, ...]
    locks: tuple[WaitObject, ...]
    ticks: int


# Waits the frames name that are not a lock's: a thread parked on them for the window waits for
# work or for a signal (an idle pool worker's Condition, a main thread's join), not in a knot;
# every waiter of a Condition sleeps on a futex of its own, so they would look like many locks.
NOT_A_LOCK = frozenset({WaitKind.QUEUE, WaitKind.CONDITION, WaitKind.EVENT, WaitKind.JOIN,
                        WaitKind.SEMAPHORE, WaitKind.FUTURE, WaitKind.BARRIER})


def knot_candidates(samples: pd.DataFrame, threads: pd.DataFrame) -> set[int]:
    """Threads that may be in a knot: not waiting for work (their role) and not parked, by their
    frames, on something other than a lock."""
    roles = {int(tid): role for tid, role in zip(threads["tid"], threads["role"])}
    tids, at = np.unique(samples["tid"].to_numpy(), return_inverse=True)
    count = samples["count"].to_numpy(dtype=np.float64)
    parking = samples["wait_kind"].isin(NOT_A_LOCK).to_numpy()
    total = dict(zip(tids.tolist(), np.bincount(at, weights=count, minlength=len(tids)).tolist()))
    parked = dict(zip(tids.tolist(), np.bincount(at[parking], weights=count[parking],
                                                 minlength=len(tids)).tolist()))
    return {tid for tid, role in roles.items()
            if role not in (ThreadRole.IDLE, ThreadRole.LIBRARY)
            and parked.get(tid, 0.0) < 0.5 * (total.get(tid, 0.0) or 1.0)}


def lock_knot(kernel: KernelView | None, os_: ProcessOS | None,
              candidates: set[int] | None = None) -> LockKnot | None:
    """The process's threads blocked all window on two locks or more while the process used
    next to no CPU (a hang even where neither the source nor native frames can be read).
    `candidates`: the threads that may be in it (knot_candidates); None: every thread."""
    if kernel is None or os_ is None or os_.window_s <= 0:
        return None
    if os_.cpu_s / os_.window_s > KNOT_MAX_PROCESS_CORES:
        return None
    blocked: list[int] = []
    locks: dict[str, WaitObject] = {}
    ticks = 0
    for tid, waits in kernel.threads.items():
        seen = kernel.ticks.get(tid, waits.observations)
        if seen < KNOT_MIN_TICKS or (candidates is not None and tid not in candidates):
            continue
        on_locks = [(o, n) for o, n in waits.objects if o.resource == ResourceKind.LOCK]
        if sum(n for _, n in on_locks) / seen < KNOT_BLOCKED_SHARE:
            continue
        blocked.append(tid)
        ticks = max(ticks, seen)
        for obj, _ in on_locks:
            locks.setdefault(obj.key, obj)
    if len(blocked) < 2 or len(locks) < 2:
        return None
    return LockKnot(kernel.pid, tuple(sorted(blocked)), tuple(locks.values()), ticks)


@dataclass(frozen=True)
class ServingPeer:
    """A process outside this one that its threads wait on in turn (a sidecar behind a pipe,
    a child): `occupancy` is the threads' summed share of ticks on it, the mean number of them
    waiting on it at once (near 1 with one request in flight at a time: it serves them one by
    one)."""

    resource: WaitObject
    occupancy: float


def serving_peer(kernel: KernelView | None, tids: list[int]) -> ServingPeer | None:
    """The pipe, child or socket these threads waited on most, summed over them, that another
    process serves (a socket: a local process listens where it leads); None when they waited
    on none."""
    if kernel is None:
        return None
    summed: dict[WaitObject, float] = {}
    for tid in tids:
        for obj, share in kernel.shares(tid):
            if obj.resource in (ResourceKind.PIPE, ResourceKind.CHILD, ResourceKind.SOCKET) and obj.holders:
                summed[obj] = summed.get(obj, 0.0) + share
    if not summed:
        return None
    best = max(summed, key=lambda o: summed[o])
    return ServingPeer(best, summed[best])
