"""Chains of waits: from what threads wait on, through who serves it, to where the wait ends.

The kernel names what each blocked thread waits on (model/kernel_waits.WaitObject). A chain
starts there and asks, hop by hop, who serves the wait: a socket's local process (read beside the
service, model/servers.py), a pipe's other end, the GIL's holder, a lock's holder (named by the
frames, model/lock_holders.py). Each resource
kind has one server rule (SERVER_RULES); a rule names the hop and either ends the chain or hands
on what the server itself waits on, which the next kind's rule reads: a lock whose holder mostly
slept on something else while others waited (its socket to a backend) is followed there. A local process below its
capacity whose threads mostly wait on one thing is followed there; at its capacity, its CPU is
the end. A new kind of resource is a decoder and a rule here, not a new check: the checks ask
the chains (Analysis.chains) where their threads' time ends.

A chain groups the threads that waited on one wait object (its key) at least MIN_THREAD_SHARE
of their ticks; its share and seconds are read the way model/servers.py's remote waits were
(the share of each thread's /proc ticks), so the checks that asked those ask this with the same
numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from diagnose.model.condition_waits import NO_CONDITION_WAITS, ConditionWaits, PoolHolding
from diagnose.model.gil_holder import HELD_ASLEEP_SHARE, LOCK_RESOURCES, GilHolding
from diagnose.model.kernel_waits import KernelView, WaitObject
from diagnose.model.lock_holders import LockHolding
from diagnose.model.servers import ServerProcess
from diagnose.vocab import ChainEnd, ResourceKind

MAX_HOPS = 6  # a chain longer than this stops, its end unknown
MIN_THREAD_SHARE = 0.05  # a thread waiting on a server less often than this is not its client
# A local server at this share of its capacity (ServerProcess.saturation) or more ends the
# chain: its CPU is the limit, whatever its threads wait on besides.
AT_CAPACITY = 0.6
# A server below capacity whose threads wait on one thing this share of their ticks is followed
# there: its requests wait in turn.
FOLLOW_SHARE = 0.2


@dataclass(frozen=True)
class Hop:
    """One link of a chain: what the waiting side waits on, and who serves it."""

    resource: ResourceKind
    label: str  # in the kernel's words: "socket to 127.0.0.1:8000", "the GIL"
    # for a hop past the first, the share of the previous server's time spent on it (a
    # process's threads' ticks, the GIL's holder's blocked instants); the first hop's is the
    # chain's `share`
    share: float = 0.0
    address: str = ""  # a socket's peer as the kernel names it ("127.0.0.1:8000", "/run/x.sock")
    processes: tuple[ServerProcess, ...] = ()  # local processes serving it, read beside the service
    pids: tuple[int, ...] = ()  # processes the kernel names holding or serving it, read or not
    thread: int | None = None  # the thread serving it, where one is named (tid)
    thread_name: str = ""  # that thread's name, as the profiled process named it
    # worker threads serving it (an executor's, a capacity limiter's: model/task_chains.py) and
    # how many of them were busy on average; 0 where no pool serves it
    workers: int = 0
    workers_busy: float = 0.0
    key: str = ""  # the wait object's key (WaitObject.key), where a reader asks for it (a pool's)
    # the code most often holding it while others waited ("app (app.py:49)"): the GIL's top
    # holder in the wait-site table, where one was named
    held_by: str = ""

    @property
    def saturation(self) -> float:
        """Its processes' mean saturation (ServerProcess.saturation): one idle copy of two is
        half the capacity unused; 0 without processes read."""
        return sum(s.saturation for s in self.processes) / len(self.processes) if self.processes else 0.0

    @property
    def busy_threads(self) -> int:
        """Its processes' threads that ran half a core or more: requests served at once."""
        return sum(s.busy_threads for s in self.processes)


@dataclass(frozen=True)
class Waiter:
    """A thread of the chain and the share of its /proc ticks it waited on the first hop."""

    tid: int
    share: float


@dataclass(frozen=True)
class Chain:
    """Threads waiting on one thing, every hop from it to the end of their wait; or asyncio
    request tasks (model/task_chains.py), which no thread's stack shows waiting: then `tasks` and
    `task_share` say how many waited and for what share of their time, and `waiters` is empty."""

    waiters: tuple[Waiter, ...]  # in the analysis's thread order
    window_s: float
    hops: tuple[Hop, ...]
    end: ChainEnd
    tasks: float = 0.0  # request tasks waiting on the first hop, on average over the reads
    task_share: float = 0.0  # of request-task time, the share spent waiting on it

    @property
    def tids(self) -> tuple[int, ...]:
        return tuple(sorted(w.tid for w in self.waiters))

    @property
    def share(self) -> float:
        """The waiters' mean share of their ticks waiting on it (the tasks' share of their time)."""
        if self.tasks:
            return round(self.task_share, 4)
        return round(sum(w.share for w in self.waiters) / len(self.waiters), 4) if self.waiters else 0.0

    @property
    def seconds(self) -> float:
        """Thread-seconds (task-seconds) waited on it over the window."""
        if self.tasks:
            return round(self.tasks * self.window_s, 3)
        return round(sum(w.share for w in self.waiters) * self.window_s, 3)

    @property
    def occupancy(self) -> float:
        """Threads (tasks) waiting on it at once, on average: requests in flight at its server."""
        return self.tasks if self.tasks else self.share * len(self.waiters)

    @property
    def first(self) -> Hop:
        return self.hops[0]

    @property
    def last(self) -> Hop:
        return self.hops[-1]

    @property
    def local_servers(self) -> tuple[ServerProcess, ...]:
        """The local processes, read beside the service, serving what the threads wait on."""
        return self.first.processes

    @property
    def at_local_backend(self) -> bool:
        """The threads wait on a connection to local processes read beside the service: the
        backends backend_saturated and underloaded ask of."""
        return self.first.resource == ResourceKind.SOCKET and bool(self.local_servers)

    def among(self, tids: Iterable[int]) -> Chain:
        """The same chain for those of its waiters among `tids` (none: no waiters)."""
        wanted = set(tids)
        return replace(self, waiters=tuple(w for w in self.waiters if w.tid in wanted))


@dataclass(frozen=True)
class ChainContext:
    """What a server rule reads besides the wait: whose wait it is and what was read around it."""

    pid: int | None  # the process whose thread waits
    servers: Mapping[int, ServerProcess]  # every local server read beside the service, by pid
    gil: GilHolding | None = None  # its GIL's holding, where read (the service's own process)
    # how often that holder was blocked holding it: the kernel's instants or the counters' CPU,
    # whichever says more (gil_holder.blocked_share), as gil_contention reads it
    gil_blocked: float = 0.0
    # its locks' holders and what they did while others waited, by the kernel's lock key
    # (model/lock_holders.py), where read (the service's own process)
    locks: Mapping[str, LockHolding] = field(default_factory=dict)
    # its threads' names by tid: a hop names the thread serving it as the stacks do ("request-3")
    thread_names: Mapping[int, str] = field(default_factory=dict)
    # its pools (a Queue of connections) and what their items' holders slept on, by the
    # condition's key (model/condition_waits.py), where read (the service's own process)
    pools: Mapping[str, PoolHolding] = field(default_factory=dict)
    # the code most often holding its GIL while threads waited for it (the GIL wait site's top
    # holder: a Python line, or C code the interpreter named the holder), where one was named
    gil_held_by: str = ""


@dataclass(frozen=True)
class Step:
    """What a server rule says of one wait: its hops (the GIL's holder blocked on a lock is
    two), then either the end or what the server waits on in turn, in process `within`, and
    the share of the server's time it does (the next hop's `share`)."""

    hops: tuple[Hop, ...]
    end: ChainEnd | None = None
    then: WaitObject | None = None
    within: int | None = None
    share: float = 0.0


ServerRule = Callable[[WaitObject, ChainContext], Step]


def _name(context: ChainContext, tid: int | None) -> str:
    """The thread's name, as the profiled process named it; "" where unknown."""
    return context.thread_names.get(tid, "") if tid is not None else ""


def _at_server(hop: Hop) -> Step:
    """A hop served by local processes that were read: their CPU is the end at capacity; below
    it, what the busiest one's threads wait on, when they mostly wait on one thing."""
    if hop.saturation >= AT_CAPACITY:
        return Step((hop,), ChainEnd.LOCAL_SERVER)
    busiest = max(hop.processes, key=lambda s: s.cpu_cores)
    if busiest.top_wait_object is not None and busiest.top_wait_share >= FOLLOW_SHARE:
        return Step((hop,), then=busiest.top_wait_object, within=busiest.pid, share=busiest.top_wait_share)
    return Step((hop,), ChainEnd.LOCAL_SERVER)


def _socket(obj: WaitObject, context: ChainContext) -> Step:
    """A connection: the local processes listening where it leads (collect/sockets.py), else
    the address outside it reaches, else the client whose next request it waits for."""
    read = tuple(context.servers[p] for p in obj.holders if p in context.servers)
    hop = Hop(ResourceKind.SOCKET, obj.label, address=obj.key.partition(":")[2], processes=read,
              pids=obj.holders)
    if read:
        return _at_server(hop)
    if obj.holders:
        return Step((hop,), ChainEnd.LOCAL_PEER)
    if obj.outbound:  # a connection this process opened that no local process serves
        return Step((hop,), ChainEnd.REMOTE)
    # its end of a connection a client opened: the client's next request (servers._own_waits
    # reads it so too)
    return Step((hop,), ChainEnd.WAITING_FOR_WORK)


def _pipe(obj: WaitObject, context: ChainContext) -> Step:
    """A pipe: the processes holding its other end."""
    read = tuple(context.servers[p] for p in obj.holders if p in context.servers)
    hop = Hop(ResourceKind.PIPE, obj.label, processes=read, pids=obj.holders)
    if read:
        return _at_server(hop)
    return Step((hop,), ChainEnd.LOCAL_PEER if obj.holders else ChainEnd.UNKNOWN)


def gil_holder_wait(context: ChainContext) -> Hop | None:
    """What the GIL's holder slept on while it held the GIL, where it was blocked most of the
    time it held it (model/gil_holder.py): a lock, with the thread running while the holder
    waited for it (the one holding that lock without the GIL), a timer, a socket... None where
    the holder ran, or was not read. gil_contention asks this of the GIL, as the chains do."""
    held = context.gil
    if held is None or held.holder_wait_kind is None or context.gil_blocked < HELD_ASLEEP_SHARE:
        return None
    # its share of the time the holder held the GIL, by the blocked share that decided the hop
    return Hop(held.holder_wait_kind, held.holder_wait, share=round(context.gil_blocked * held.holder_wait_share, 4),
               thread=held.lock_runner, thread_name=_name(context, held.lock_runner))


def _gil(obj: WaitObject, context: ChainContext) -> Step:
    """The GIL's holder, and what it slept on holding it (gil_holder_wait): a lock's holder
    ends the chain there; any other wait is the holder's own (the kernel names no object to
    follow it by)."""
    hop = Hop(ResourceKind.GIL, obj.label, held_by=context.gil_held_by)
    waited = gil_holder_wait(context)
    if waited is None:
        return Step((hop,), ChainEnd.GIL_HOLDER)
    return Step((hop, waited), ChainEnd.LOCK_HOLDER if waited.resource in LOCK_RESOURCES else ChainEnd.GIL_HOLDER)


def _lock(obj: WaitObject, context: ChainContext) -> Step:
    """A lock: its holder, where the frames name the threads holding it (model/lock_holders.py).
    A holder mostly asleep on something else while others waited is followed there, in its
    own process: the lock's waiters wait on that in turn. A holder on a CPU, or one nothing
    names, ends the chain."""
    held = context.locks.get(obj.key)
    holder = held.thread if held is not None else None
    hop = Hop(ResourceKind.LOCK, obj.label, pids=obj.holders, thread=holder,
              thread_name=_name(context, holder))
    if held is None or held.wait is None or held.wait_share < FOLLOW_SHARE:
        return Step((hop,), ChainEnd.LOCK_HOLDER)
    return Step((hop,), then=held.wait, within=context.pid, share=held.wait_share)


# Ends past a pool's holders that are a limit of their own (a lock's or the GIL's holder, a
# server at capacity, the quota...): more items would queue there. The others (a sleep, an
# address outside, a server with room) end the chain at the pool's items.
_LATENCY_ENDS = (ResourceKind.SLEEP, ResourceKind.POLL, ResourceKind.OTHER)


def _pool(obj: WaitObject, context: ChainContext) -> Step:
    """A pool (a Queue of connections): its items' holders are the threads that queue on it, at
    the other times. What they slept on holding one is followed where it leads to a limit (a
    local server, a lock); where it is a call whose own end is no limit (a sleep, an address no
    local process serves), the pool's items are the end: every one held, more serve more."""
    held = context.pools.get(obj.key)
    hop = Hop(ResourceKind.POOL, obj.label, key=obj.key)
    if held is None or held.wait is None or held.wait_share < FOLLOW_SHARE:
        return Step((hop,), ChainEnd.POOL_ITEMS)
    wait = held.wait
    served_here = wait.resource == ResourceKind.SOCKET and any(p in context.servers for p in wait.holders)
    if wait.resource in _LATENCY_ENDS or (wait.resource == ResourceKind.SOCKET and not served_here):
        return Step((hop, Hop(wait.resource, wait.label, share=round(held.wait_share, 4),
                              address=wait.key.partition(":")[2] if wait.resource == ResourceKind.SOCKET else "")),
                    ChainEnd.POOL_ITEMS)
    return Step((hop,), then=wait, within=context.pid, share=held.wait_share)


def _ends(end: ChainEnd) -> ServerRule:
    """A kind whose wait ends where it is: a timer, a listening socket, a child; a file lock or
    a capacity at its holders (the kernel names the processes holding a file lock)."""
    def rule(obj: WaitObject, context: ChainContext) -> Step:
        assert obj.resource is not None
        return Step((Hop(obj.resource, obj.label, pids=obj.holders),), end)
    return rule


# Per resource kind, who serves a wait on it.
SERVER_RULES: Mapping[ResourceKind, ServerRule] = {
    ResourceKind.GIL: _gil,
    ResourceKind.LOCK: _lock,
    ResourceKind.FILE_LOCK: _ends(ChainEnd.LOCK_HOLDER),
    ResourceKind.CAPACITY: _ends(ChainEnd.LOCK_HOLDER),  # its tokens' holders
    ResourceKind.FUTURE: _ends(ChainEnd.WORKER_THREADS),  # tasks only: model/task_chains.py
    ResourceKind.POOL: _pool,
    ResourceKind.PIPE: _pipe,
    ResourceKind.SOCKET: _socket,
    ResourceKind.LISTEN: _ends(ChainEnd.WAITING_FOR_WORK),
    ResourceKind.CHILD: _ends(ChainEnd.CHILD),
    ResourceKind.SLEEP: _ends(ChainEnd.TIMER),
    ResourceKind.CPU_QUOTA: _ends(ChainEnd.CPU_QUOTA),
    ResourceKind.POLL: _ends(ChainEnd.UNKNOWN),
    ResourceKind.OTHER: _ends(ChainEnd.UNKNOWN),
}


def follow(obj: WaitObject, context: ChainContext) -> tuple[tuple[Hop, ...], ChainEnd]:
    """Every hop from `obj` to its end, at most MAX_HOPS; a hop into a process already on the
    chain ends it as a cycle."""
    hops: list[Hop] = []
    visited = {context.pid}
    share = 0.0
    while True:
        assert obj.resource is not None  # a thread on a CPU waits on nothing
        step = SERVER_RULES[obj.resource](obj, context)
        hops.extend([replace(step.hops[0], share=share), *step.hops[1:]] if share else step.hops)
        if {p for hop in step.hops for p in hop.pids} & (visited - {context.pid}):
            return tuple(hops), ChainEnd.CYCLE  # served by a process the chain came through
        if step.end is not None:
            return tuple(hops), step.end
        if step.then is None or len(hops) >= MAX_HOPS:
            return tuple(hops), ChainEnd.UNKNOWN
        share = step.share
        if step.within != context.pid:
            visited.add(step.within)
            # a process past the first: its GIL's and its locks' holders were not read
            context = ChainContext(step.within, context.servers)
        obj = step.then


def _grouped(kernel: KernelView, tids: Iterable[int],
             conditions: ConditionWaits = NO_CONDITION_WAITS) -> dict[str, tuple[WaitObject, tuple[Waiter, ...]]]:
    """Per wait object (its key), one object standing for it and the threads among `tids` that
    waited on it at least MIN_THREAD_SHARE of their ticks; keys in the order first seen. A
    condition's waiters, each on a futex of its own, are one object (`conditions`)."""
    shares: dict[str, dict[int, float]] = {}
    first: dict[str, WaitObject] = {}
    holders: dict[str, tuple[int, ...]] = {}
    for tid in tids:
        for obj, share in kernel.shares(tid):
            obj = conditions.rename(tid, obj)
            if obj.resource is None:  # on a CPU
                continue
            per_thread = shares.setdefault(obj.key, {})
            per_thread[tid] = per_thread.get(tid, 0.0) + share
            first.setdefault(obj.key, obj)
            holders[obj.key] = obj.holders
    out = {}
    for key, per_thread in shares.items():
        waiters = tuple(Waiter(t, v) for t, v in per_thread.items() if v >= MIN_THREAD_SHARE)
        if waiters:
            # one key, one side: a poll on a connection this process opened is decoded outbound
            # as a read of it is (model/kernel_waits.py)
            out[key] = (replace(first[key], holders=holders[key]), waiters)
    return out


def follow_chains(kernel: KernelView, tids: Iterable[int], window_s: float, context: ChainContext,
                  knotted: Collection[int] = (),
                  conditions: ConditionWaits = NO_CONDITION_WAITS) -> tuple[Chain, ...]:
    """Every chain of the threads `tids` of the process `kernel` read, most thread-time first.
    `knotted`: the threads of its knots and those waiting into them (model/knots.py);
    `conditions`: its threads' condition waits (model/condition_waits.py)."""
    chains = []
    for obj, waiters in _grouped(kernel, tids, conditions).values():
        hops, end = follow(obj, context)
        if knotted and all(w.tid in knotted for w in waiters):
            end = ChainEnd.KNOT  # nothing past the knot's threads ends it: they wait on one another
        chains.append(Chain(waiters, window_s, hops, end))
    return tuple(sorted(chains, key=lambda c: -c.seconds))
