"""Knots: threads that wait on one another through any resource, none of them running — a hang.

A lock cycle (model/deadlock.py) is one shape of hang. A thread holding a lock can as well wait
for a future whose job needs that lock, a parent for a child that waits for the parent to read
its pipe, a stage for a queue only a blocked stage feeds: whatever the resources, a set of
blocked threads whose every wait only they can end will never run again.

Each thread blocked over the whole window waits on one thing (a `Wait`), and the thing names
its *servers*: the threads that could end the wait.

- A Python lock (the `with` / `acquire()` at its wait line, model/held_locks.py): the blocked
  threads whose stacks hold it (a lock is held by one thread at a time: one blocked all window
  holding it held it all window).
- A concurrent.futures future (`Future.result()`, `wait`, `as_completed`): the threads that
  can complete it — every executor worker inside a job (a worker waiting for work runs none, so
  the future is a busy one's), a process pool's manager thread, an event loop's thread
  (`run_coroutine_threadsafe`). None of them in the process: no server known.
- A queue (`Queue.get`, or `put` into a full one): the threads whose loop puts to it (gets from
  it), matched by the queue's name at the call as model/structure.py matches stages.
- What the kernel names (a thread whose frames name none of the above, asleep on one object in
  KNOT_BLOCKED_SHARE of its /proc ticks): a child process (`wait4`: every thread of the child),
  a pipe (read, write or poll: every thread of the processes holding its other end), a file lock
  (its holders from /proc/locks), a connection to a local process (that process). Every thread
  of such a process is a server (the kernel cannot say which will read the pipe): a process
  with one thread outside the knot is no part of it.

Anything else — a timer, an event, a condition, a join, a semaphore, the GIL, a socket to
another host, a process that was not sampled, a lock no stack holds, a queue fed from nowhere
the source names — has no server this model can check, and a thread waiting on it is never in a
knot (it may end by itself or from outside).

Blocked all window: every sample of the thread a wait (lock, IO or idle; never running nor
runnable) at one line, at least MIN_BLOCKED_SAMPLES of them spanning the window where instants
are measured, and /proc watched it not run (model/deadlock.os_confirms: next to no CPU, rarely
in state R). Without /proc's counters nothing is a knot.

A knot (Holt's, for waits any one of whose servers can end them: the OR model) is a set of such
threads where every server of every member's wait is a member. Found as the largest closed set
(a thread with a server outside the set leaves it, until none does), then the bottom strongly
connected groups of its wait-for graph: each is a knot; the set's other threads wait on a knot,
serve none of it, and are its victims. Its chain is a cycle through its members, each hop the
member's wait and the member serving it.

A knot whose every wait is a lock is a lock cycle: model/deadlock.py reports those (with when
they formed, and a lock order), so the check reads knots with a wait of another kind. Not done:
a knot that closes inside the window (lock cycles are dated; here every member must have been
blocked all window), waits the frames and the kernel cannot name (an `Event` set by a blocked
thread), asyncio tasks (model/await_graph.py finds their await cycles), a wait on a specific
child among several (the kernel's `wait4` argument is not kept: every child the tree sampled
serves it), and a future completed by hand (`Future.set_result` from a thread no executor's):
it is read as its process's executors', so a thread waiting on one while it holds what a busy,
blocked worker needs reads as knotted though the thread that would set it may still run.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from diagnose.model.deadlock import (MIN_BLOCKED_SAMPLES, WINDOW_COVERAGE, cycle_in, os_confirms,
                                     strong_groups)
from diagnose.model.event_loops import frame_owner
from diagnose.model.held_locks import LockSite, held_in_stack, waited_at
from diagnose.model.kernel_waits import KNOT_BLOCKED_SHARE, RUNNING_OBJECT, KernelView, WaitObject
from diagnose.samples.profile import Frame, frame_is
from diagnose.model.sampled import SampledProcess
from diagnose.model.structure import is_entry, loop_frame, queue_op, source_queue_ops
from diagnose.report.model.sections import CallSite
from diagnose.vocab import CodeOwner, ResourceKind, ThreadState, WaitKind

# Every sample of a blocked thread is one of these: asleep, never running nor runnable.
BLOCKED_STATES = (ThreadState.LOCK, ThreadState.IO, ThreadState.IDLE)

_EXECUTOR_WORKER = ("concurrent/futures/thread.py", re.compile(r"(^|\.)_worker$"))
_WORK_ITEM = ("concurrent/futures/thread.py", re.compile(r"(^|\.)run$"))
# Threads that complete futures besides a thread pool's workers.
_FUTURE_COMPLETERS = (
    ("concurrent/futures/process.py", re.compile(r"(ExecutorManagerThread\.run|_queue_management_worker)$")),
    ("asyncio/base_events.py", re.compile(r"(^|\.)run_forever$")),
    ("uvloop/__init__.py", re.compile(r"(^|\.)run$")),
)
# Queue waits of a library's own loop: waiting for work, which anyone may submit.
_LIBRARY_QUEUES = ("concurrent/futures/", "multiprocessing/")
_WRITES = frozenset({"write", "writev", "pwrite64", "sendto", "sendmsg"})


class Resource(enum.StrEnum):
    """What a thread of a knot waits on."""

    LOCK = "lock"              # a Python lock: its holders
    FUTURE = "future"          # a concurrent.futures future: the threads that can complete it
    QUEUE_GET = "queue_get"    # an empty queue: the threads that put to it
    QUEUE_PUT = "queue_put"    # a full queue: the threads that get from it
    CHILD = "child"            # a child process's exit: the child's threads
    PIPE_READ = "pipe_read"    # an empty pipe: the processes holding its writing end
    PIPE_WRITE = "pipe_write"  # a full pipe: the processes holding its reading end
    FILE_LOCK = "file_lock"    # a file lock: the processes holding it
    SOCKET = "socket"          # a connection to a local process: that process


# How a hop's server is said to end the wait ("held by", "read by" ...).
SERVED_WORDS = {
    Resource.LOCK: "held by", Resource.FUTURE: "run by", Resource.QUEUE_GET: "fed by",
    Resource.QUEUE_PUT: "drained by", Resource.CHILD: "served by", Resource.PIPE_READ: "written by",
    Resource.PIPE_WRITE: "read by", Resource.FILE_LOCK: "held by", Resource.SOCKET: "served by",
}


@dataclass(frozen=True, order=True)
class ThreadId:
    pid: int
    tid: int


@dataclass(frozen=True)
class Serving:
    """One server of a wait: the thread, what it holds or does that the wait needs, and the line
    that took or runs it (None where the kernel names the holder: a process's pipe end)."""

    thread: ThreadId
    holds: str  # "FeatureCache._lock", "the job FeatureCache._load", "the reading end of pipe 7"
    at: CallSite | None = None


@dataclass(frozen=True)
class Wait:
    """A thread blocked all window on one thing, and the threads that could end the wait (none:
    no server known, never part of a knot)."""

    thread: ThreadId
    name: str  # the thread's name
    resource: Resource
    key: str  # what it waits on: two waits with one key wait on one thing
    label: str  # in words: "FeatureCache._lock", "a future", "child process 4712", "pipe 7 (full)"
    at: CallSite | None  # where it waits: the application's line
    servers: tuple[Serving, ...]
    samples: int = 0
    site_frame: int = -1  # frame id of the wait site in its process's profile


@dataclass(frozen=True)
class Hop:
    """A thread's wait and the thread serving it (the next one along a knot's chain)."""

    wait: Wait
    server: Serving
    server_name: str


@dataclass(frozen=True)
class Knot:
    """Threads waiting on one another, none running. `chain`: a cycle through them, each hop a
    member's wait and the next member, serving it (the last hop's server is the first member);
    `others`: the knot's other members, each with a member serving it; `victims`: blocked
    threads whose waits lead into the knot and that serve none of it."""

    chain: tuple[Hop, ...]
    others: tuple[Hop, ...] = ()
    victims: tuple[Hop, ...] = ()

    @property
    def members(self) -> tuple[Hop, ...]:
        return self.chain + self.others

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(sorted({h.wait.thread.pid for h in self.members}))

    @property
    def only_locks(self) -> bool:
        """Every wait of it is a Python lock: a lock cycle (model/deadlock.py's to report)."""
        return all(h.wait.resource == Resource.LOCK for h in self.members)

    def serving(self, thread: ThreadId) -> Serving | None:
        """What the member `thread` holds that another member waits for (how it serves it)."""
        return next((h.server for h in self.members if h.server.thread == thread), None)


def find_knots(waits: Iterable[Wait]) -> tuple[Knot, ...]:
    """Every knot among the waits (see the module's docstring), in a stable order."""
    closed = {w.thread: w for w in waits if w.servers}
    changed = True
    while changed:  # a thread with a server outside the set leaves it
        changed = False
        for thread, wait in list(closed.items()):
            if any(s.thread not in closed for s in wait.servers):
                del closed[thread]
                changed = True
    if not closed:
        return ()
    ids = sorted(closed)
    index = {t: i for i, t in enumerate(ids)}
    edges = {i: sorted({index[s.thread] for s in closed[t].servers}) for i, t in enumerate(ids)}
    names = {t: w.name for t, w in closed.items()}

    def hop(node: int, towards: int) -> Hop:
        wait = closed[ids[node]]
        server = next(s for s in wait.servers if s.thread == ids[towards])
        return Hop(wait, server, names[server.thread])

    knots: list[tuple[tuple[Hop, ...], tuple[Hop, ...]]] = []
    owner: dict[int, int] = {}  # thread index -> its knot
    for group in strong_groups(edges):
        members = set(group)
        if any(e not in members for n in group for e in edges[n]):
            continue  # waits on another group: victims
        if len(group) == 1 and group[0] not in edges[group[0]]:
            continue
        cycle = cycle_in(group[0], edges, members) or [group[0]]
        chain = tuple(hop(n, cycle[(i + 1) % len(cycle)]) for i, n in enumerate(cycle))
        others = tuple(hop(n, next(e for e in edges[n] if e in members)) for n in group if n not in cycle)
        for n in group:
            owner[n] = len(knots)
        knots.append((chain, others))
    victims: dict[int, list[Hop]] = {i: [] for i in range(len(knots))}
    changed = True
    while changed:  # nearest first: a thread waiting on a knot's member, or on an earlier victim
        changed = False
        for node in range(len(ids)):
            if node in owner:
                continue
            target = next((e for e in edges[node] if e in owner), None)
            if target is not None:
                owner[node] = owner[target]
                victims[owner[target]].append(hop(node, target))
                changed = True
    return tuple(Knot(chain, others, tuple(victims[i])) for i, (chain, others) in enumerate(knots))


def _file_name(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def thread_words(name: str, thread: ThreadId, knot: Knot) -> str:
    """A thread as a knot's words name it: with its process when the knot spans several."""
    return f"{name} (process {thread.pid})" if len(knot.pids) > 1 else name


def at_words(at: CallSite | None, short: Callable[[str], str] = _file_name) -> str:
    return f" ({short(at.file)}:{at.line})" if at is not None else ""


def chain_words(knot: Knot, short: Callable[[str], str] = _file_name) -> str:
    """"request-0 waits for a future (cache.py:70), run by loader_0, which waits for
    FeatureCache._lock (cache.py:50), held by request-0": the knot's chain, hop by hop, back to
    its first thread. `short`: how a file is named."""
    words = []
    for i, hop in enumerate(knot.chain):
        wait = hop.wait
        lead = f"{thread_words(wait.name, wait.thread, knot)} waits for" if i == 0 else "which waits for"
        words.append(f"{lead} {wait.label}{at_words(wait.at, short)}, {SERVED_WORDS[wait.resource]} "
                     f"{thread_words(hop.server_name, hop.server.thread, knot)}")
    return ", ".join(words)


# ---------------------------------------------------------------- the waits of sampled processes


@dataclass(frozen=True)
class _Blocked:
    """A thread of a process the samples and /proc saw blocked all window."""

    thread: int  # index into the process's thread summary
    tid: int
    name: str
    stacks: tuple[int, ...]  # its distinct stacks, most sampled first
    site_frame: int
    kind: WaitKind  # the frames' wait kind, most sampled
    samples: int


def process_id(process: SampledProcess) -> int:
    """The process's pid: the kernel's, else its threads', else 0 (a profile with none)."""
    if process.kernel is not None:
        return process.kernel.pid
    if "pid" not in process.threads:
        return 0
    pids = process.threads["pid"].dropna()
    return int(pids.iloc[0]) if len(pids) else 0


def thread_ids(pid: int, process: SampledProcess) -> tuple[ThreadId, ...]:
    """Every thread of the process anything saw: sampled, counted by /proc, or by the kernel (a
    native thread without Python frames serves a pipe as well as any)."""
    tids = {int(t) for t in process.threads["tid"]}
    if process.os is not None:
        tids |= set(process.os.threads)
    if process.kernel is not None:
        tids |= set(process.kernel.threads)
    return tuple(ThreadId(pid, t) for t in sorted(tids))


def process_knots(process: SampledProcess) -> tuple[Knot, ...]:
    """The knots inside one process: its waits on other processes name no server here."""
    pid = process_id(process)
    return find_knots(process_waits(process, pid, {pid: thread_ids(pid, process)}))


def tree_knots(processes: Sequence[tuple[int, SampledProcess]]) -> tuple[Knot, ...]:
    """The knots spanning two processes or more of a service (each process's own are
    process_knots')."""
    world = {pid: thread_ids(pid, p) for pid, p in processes}
    waits = [w for pid, p in processes for w in process_waits(p, pid, world)]
    return tuple(k for k in find_knots(waits) if len(k.pids) > 1)


def blocked_threads(process: SampledProcess) -> list[_Blocked]:
    """The threads blocked all window (the module's docstring), in thread order."""
    samples = process.samples
    if samples.empty or process.os is None:
        return []
    profile = process.profile
    window = profile.window_s or 0.0
    measured = bool(profile.instants == "measured" and window)
    states = samples["state"].to_numpy()
    waiting = np.isin(states, [str(s) for s in BLOCKED_STATES])
    counts, sites, times = (samples["count"].to_numpy(), samples["site"].to_numpy(),
                            samples["t"].to_numpy())
    stack_col, kinds = samples["stack"].to_numpy(), samples["wait_kind"].to_numpy()
    out = []
    for thread, rows in samples.groupby("thread", sort=True).indices.items():
        count = int(counts[rows].sum())
        run_sites = np.unique(sites[rows])
        if count < MIN_BLOCKED_SAMPLES or not waiting[rows].all() or len(run_sites) != 1 or run_sites[0] < 0:
            continue
        if measured:
            t = times[rows]
            if (np.isnan(t).any() or t.max() < WINDOW_COVERAGE * window
                    or t.max() - t.min() < WINDOW_COVERAGE * window - 2 * profile.interval_s):
                continue
        row = process.threads.loc[thread]
        tid = int(row["tid"])
        if not os_confirms(process.os, tid):
            continue
        by_stack: dict[int, int] = {}
        by_kind: dict[str, int] = {}
        for r in rows.tolist():
            by_stack[int(stack_col[r])] = by_stack.get(int(stack_col[r]), 0) + int(counts[r])
            by_kind[str(kinds[r])] = by_kind.get(str(kinds[r]), 0) + int(counts[r])
        stacks = tuple(sorted(by_stack, key=lambda s: (-by_stack[s], s)))
        kind = WaitKind(max(by_kind, key=lambda k: (by_kind[k], k)))
        out.append(_Blocked(int(thread), tid, str(row["name"]), stacks, int(run_sites[0]), kind, count))
    return out


def process_waits(process: SampledProcess, pid: int, world: Mapping[int, tuple[ThreadId, ...]]
                  ) -> tuple[Wait, ...]:
    """The waits of the process's threads blocked all window, each with its servers (none where
    this model cannot name them). `world`: every thread of every process whose threads may
    serve a wait of this one, by pid (a process outside it serves nothing this model can see)."""
    blocked = blocked_threads(process)
    if not blocked:
        return ()
    reader = _Reader(process, pid, world, blocked)
    return tuple(w for w in (reader.wait_of(b) for b in blocked) if w is not None)


class _Reader:
    """Reads one process's blocked threads' waits (process_waits)."""

    def __init__(self, process: SampledProcess, pid: int, world: Mapping[int, tuple[ThreadId, ...]],
                 blocked: list[_Blocked]):
        self.process = process
        self.pid = pid
        self.world = world
        self.blocked = blocked
        self._held: dict[int, dict[str, LockSite]] | None = None
        self._queues: dict[int, tuple[set[str], set[str]]] | None = None
        self._completers: list[Serving] | None = None

    def frames(self, stack: int) -> list[Frame]:
        return [self.process.frame(f) for f in self.process.profile.stacks[stack]]

    def site_index(self, stack: int, site_frame: int) -> int:
        return self.process.profile.innermost_index(stack, site_frame)

    def wait_of(self, b: _Blocked) -> Wait | None:
        frames = self.frames(b.stacks[0])
        site = self.site_index(b.stacks[0], b.site_frame)
        if site < 0:
            return None
        at = _app_line(frames, site)
        thread = ThreadId(self.pid, b.tid)

        def wait(resource: Resource, key: str, label: str, servers: Iterable[Serving],
                 where: CallSite | None) -> Wait:
            return Wait(thread, b.name, resource, key, label, where, tuple(servers), b.samples, b.site_frame)

        if b.kind in (WaitKind.LOCK, WaitKind.RLOCK):
            lock = waited_at(frames, site)
            if lock is None:
                return None
            holders = [Serving(ThreadId(self.pid, self.blocked[i].tid), held.qualified,
                               CallSite(held.function, held.file, held.line))
                       for i, held in self.holders_of(lock.identity)]
            return wait(Resource.LOCK, f"lock:{self.pid}:{lock.identity}", lock.qualified, holders,
                        CallSite(lock.function, lock.file, lock.line))
        if b.kind == WaitKind.FUTURE:
            return wait(Resource.FUTURE, f"future:{thread.pid}:{thread.tid}", "a future",
                        self.completers(), at)
        if b.kind == WaitKind.QUEUE:
            op = queue_op(frames)
            if op is None or any(lib in frames[op[2]].file for lib in _LIBRARY_QUEUES):
                return None  # a library's worker waiting for work: anyone may submit
            name = op[1]
            getting = op[0] == "get"
            servers = [Serving(ThreadId(self.pid, tid), f"{'puts to' if getting else 'gets from'} queue {name}")
                       for tid, (gets, puts) in self.queue_users().items() if name in (puts if getting else gets)]
            return wait(Resource.QUEUE_GET if getting else Resource.QUEUE_PUT, f"queue:{self.pid}:{name}",
                        f"queue {name} ({'empty' if getting else 'full'})", servers, at)
        if b.kind not in (WaitKind.NONE, WaitKind.IO):
            return None  # an event, a condition, a join ...: no server this model can name
        return self.kernel_wait(b, thread, at)

    def kernel_wait(self, b: _Blocked, thread: ThreadId, at: CallSite | None) -> Wait | None:
        """The wait the kernel names: a child, a pipe, a file lock, a connection to a local
        process; None for any other, or one a process outside `world` serves."""
        obj = _kernel_object(self.process.kernel, b.tid)
        if obj is None or not obj.holders:
            return None
        if obj.resource == ResourceKind.PIPE:
            writing = obj.syscall in _WRITES
            resource = Resource.PIPE_WRITE if writing else Resource.PIPE_READ
            inode = obj.key.partition(":")[2]
            label = f"pipe {inode} ({'full' if writing else 'empty'})"
            holds = f"the {'reading' if writing else 'writing'} end of pipe {inode}"
        elif obj.resource == ResourceKind.CHILD:
            resource, holds = Resource.CHILD, ""
            label = f"child process {', '.join(map(str, obj.holders))} to exit"
        elif obj.resource == ResourceKind.FILE_LOCK:
            resource, label, holds = Resource.FILE_LOCK, obj.label, obj.label
        elif obj.resource == ResourceKind.SOCKET and obj.outbound:
            resource, label, holds = Resource.SOCKET, obj.label, "the connection's other end"
        else:
            return None  # a timer, the GIL, a futex no stack names, a connection it accepted ...
        servers: list[Serving] = []
        for pid in obj.holders:
            if pid not in self.world:
                return None  # a process not sampled: what its threads do is unknown
            servers += [Serving(t, holds or f"process {pid}'s exit") for t in self.world[pid]]
        return Wait(thread, b.name, resource, f"{resource}:{obj.key}", label, at, tuple(servers),
                    b.samples, b.site_frame)

    def holders_of(self, identity: str) -> list[tuple[int, LockSite]]:
        """(index into the blocked threads, the lock as it took it) for each blocked thread
        whose stack holds the lock."""
        if self._held is None:
            self._held = {}
            for i, b in enumerate(self.blocked):
                held: dict[str, LockSite] = {}
                for stack in b.stacks:
                    frames = self.frames(stack)
                    for lock in held_in_stack(frames, self.site_index(stack, b.site_frame)):
                        held.setdefault(lock.identity, lock)
                self._held[i] = held
        return [(i, held[identity]) for i, held in self._held.items() if identity in held]

    def completers(self) -> list[Serving]:
        """The threads that can complete a future of this process: executor workers inside a
        job (named by it), a process pool's manager, an event loop's thread."""
        if self._completers is None:
            self._completers = []
            samples = self.process.samples
            for thread, rows in samples.groupby("thread", sort=True).indices.items():
                tid = int(self.process.threads.loc[thread, "tid"])
                serving = self._serving_futures(ThreadId(self.pid, tid),
                                                np.unique(samples["stack"].to_numpy()[rows]).tolist())
                if serving is not None:
                    self._completers.append(serving)
        return self._completers

    def _serving_futures(self, thread: ThreadId, stacks: list[int]) -> Serving | None:
        """How the thread completes futures: an event loop, a process pool's manager, an
        executor worker inside a job (the job); None for any other thread, and for a worker
        waiting for work (it runs no job: a pending future is a busy worker's)."""
        for stack in stacks:
            frames = self.frames(stack)
            if any(frame_is(f, *pattern) for f in frames for pattern in _FUTURE_COMPLETERS):
                return Serving(thread, "the event loop or process pool that completes futures")
            if not any(frame_is(f, *_EXECUTOR_WORKER) for f in frames):
                continue
            item = next((i for i, f in enumerate(frames) if frame_is(f, *_WORK_ITEM)), -1)
            job = next((f for f in frames[item + 1:] if not f.native), None) if item >= 0 else None
            if job is not None:
                return Serving(thread, f"the job {job.function}", CallSite(job.function, job.file, job.line))
        return None

    def queue_users(self) -> dict[int, tuple[set[str], set[str]]]:
        """tid -> (queues it gets from, queues it puts to), from its stacks' queue calls and the
        source of its loop function (model/structure.py reads stages the same way)."""
        if self._queues is None:
            self._queues = {}
            samples = self.process.samples
            for thread, rows in samples.groupby("thread", sort=True).indices.items():
                tid = int(self.process.threads.loc[thread, "tid"])
                gets: set[str] = set()
                puts: set[str] = set()
                stacks = np.unique(samples["stack"].to_numpy()[rows]).tolist()
                for stack in stacks:
                    frames = self.frames(stack)
                    op = queue_op(frames)
                    if op is not None:
                        (gets if op[0] == "get" else puts).add(op[1])
                    loop = loop_frame(frames)
                    if loop >= 0 and not is_entry(frames[loop].function, frames[loop].file):
                        source_gets, source_puts = source_queue_ops(frames[loop])
                        gets |= source_gets
                        puts |= source_puts
                self._queues[tid] = (gets, puts)
        return self._queues


def _kernel_object(kernel: KernelView | None, tid: int) -> WaitObject | None:
    """The one object the kernel saw the thread asleep on in KNOT_BLOCKED_SHARE of the ticks it
    was asleep. Its ticks on a CPU do not count: whether it runs is blocked_threads' question,
    answered by the counters (deadlock.os_confirms), which allow the few a blocked thread shows
    when an observer's stop wakes it (CI: a parent in wait4 seen running on 2 of 36 ticks, its
    knot with the child on its pipe missed at 34 / 36 = 0.94)."""
    if kernel is None or tid not in kernel.threads:
        return None
    waits = kernel.threads[tid]
    top = waits.top
    if top is None or top == RUNNING_OBJECT:
        return None
    seen = max(1, kernel.ticks.get(tid, waits.observations), waits.observations)
    running = sum(n for o, n in waits.objects if o == RUNNING_OBJECT)
    on_top = sum(n for o, n in waits.objects if o.key == top.key)
    return top if on_top / max(1, seen - running) >= KNOT_BLOCKED_SHARE else None


def _app_line(frames: list[Frame], site: int) -> CallSite | None:
    """The application's line a wait is at: the innermost frame at or above the site that is not
    the runtime's (a `Popen.wait` is waited at the line that calls it)."""
    for i in range(site, -1, -1):
        frame = frames[i]
        if not frame.native and frame_owner(frame) != CodeOwner.RUNTIME:
            return CallSite(frame.function, frame.file, frame.line)
    frame = frames[site]
    return CallSite(frame.function, frame.file, frame.line) if not frame.native else None
