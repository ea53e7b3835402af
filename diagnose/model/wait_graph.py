"""One wait-for graph per service, from what the kernel saw each blocked thread wait on.

Threads of one process that spent the window waiting on the same thing are one node; each
resource they waited on (model/kernel_waits.WaitObject: the GIL, a lock's futex, a file lock, a
pipe, a socket, a child, a timer) is another; `waits_for` edges carry the share of the waiters'
/proc ticks. Where the kernel names who holds or serves a resource (a file lock's holder from
/proc/locks, the process at a pipe's other end, a child) a `held_by` / `served_by` edge goes to
that process's node. The bottleneck is the resource held by, or served by, something else that
the most thread time waits for; a knot is a set of threads blocked all window on locks while
nothing in their process runs: a hang (`lock_knot`, which the deadlock check asks when the
source cannot name the locks), or threads waiting on one another through any resource, none
running (model/knots.py: a future, a queue, a child, a pipe), said with its chain.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from diagnose.vocab import AwaitKind
from diagnose.model.await_sites import WORKER_LOOP_FRAMES
from diagnose.model.kernel_waits import (Blocking, KernelView, WaitObject, knot_candidates, lock_knot,
                                         serving_peer)
from diagnose.model.held_locks import LockSite, acquired_at
from diagnose.model.knots import Knot, chain_words, tree_knots
from diagnose.samples.profile import frame_is
from diagnose.model.servers import ServerProcess
from diagnose.vocab import (RUNNING, GraphEdgeKind, NodeKind, ProcessRole, ResourceKind, ThreadRole,
                                  ThreadState)
from diagnose.report.model.wait_graph import WaitEdge, WaitGraph, WaitNode

if TYPE_CHECKING:  # the service is read here, built elsewhere
    from diagnose.model.analysis import Analysis
    from diagnose.model.service import ProcessView, Service

MIN_EDGE_SHARE = 0.05  # a thread waiting on something less often than this draws no edge
_PROCESS_WORDS = {ProcessRole.WORKER: "worker", ProcessRole.PEER: "peer"}  # else "process"
RUNS_MOSTLY = 0.5  # a thread group on a CPU this share of its ticks is labelled by where it ran
PEER_OCCUPANCY = 0.5  # threads on a serving process at once, on average: it serves them in turn
MAX_NODES = 40
# Resources whose waiters wait for another thread or process to let go (or to answer): the
# candidates for the bottleneck. A timer or a socket to a downstream is a wait outside the
# service, named but never its bottleneck here (underloaded speaks of those).
HELD_RESOURCES = (ResourceKind.GIL, ResourceKind.LOCK, ResourceKind.POOL, ResourceKind.FILE_LOCK,
                  ResourceKind.PIPE, ResourceKind.CHILD, ResourceKind.CAPACITY)
def build_wait_graph(service: Service) -> WaitGraph | None:
    """The service's graph; None when no process was read by the kernel wait reader."""
    # A master's waits (signal loops, its workers' pipes) are never the service's bottleneck.
    views = [v for v in service.processes if v.analysis.kernel is not None and v.pid is not None
             and v.role != ProcessRole.MASTER]
    if not views:
        return None
    g = _Drawing.empty()
    observations = 0
    for view in views:
        kernel = view.analysis.kernel
        assert kernel is not None and view.pid is not None
        observations += kernel.observations
        _draw_process(view.pid, view.role, view.analysis, kernel, g)
    # knots across the tree's processes: the masters' threads among them are drawn, then marked
    across = [k for k in tree_knots([(v.pid, v.analysis) for v in service.processes
                                     if v.pid is not None]) if not k.only_locks]
    _draw_knotted_masters(service, views, across, g)
    servers = views[0].analysis.servers
    _draw_holders(g, servers)
    peers = _lock_peers(views, g)
    for resource_id, holders in g.held_threads.items():
        for target in holders:
            g.edges.append(WaitEdge(resource_id, target, GraphEdgeKind.HELD_BY))
    knots, chains = _knots(views, across, g)
    bottleneck, summary = _bottleneck(g.nodes, g.edges, g.waited, g.waiters, g.holders_of, knots, peers,
                                      servers, chains)
    kept = _keep(g.nodes, g.edges, bottleneck)
    return WaitGraph(tuple(n for n in g.nodes.values() if n.id in kept),
                     tuple(e for e in g.edges if e.source in kept and e.target in kept),
                     tuple(knots), bottleneck, summary, observations)


@dataclass(frozen=True)
class _Drawing:
    """The graph as it is drawn, process by process: its nodes and edges, and what the later
    edges and the bottleneck read of them."""

    nodes: dict[str, WaitNode]
    edges: list[WaitEdge]
    waited: dict[str, float]  # resource node -> thread-seconds waited
    waiters: dict[str, set[str]]  # resource node -> the thread nodes waiting on it
    holders_of: dict[str, tuple[int, ...]]  # resource node -> the pids the kernel says hold it
    holder_shares_of: dict[str, tuple[float, ...]]
    group_of_pid: dict[int, str]  # the thread node that serves a process's clients
    request_groups: set[str]
    held_threads: dict[str, list[str]]  # a capacity -> the thread nodes holding its tokens
    group_tids: dict[str, tuple[int, ...]]  # a thread node -> its threads

    @classmethod
    def empty(cls) -> _Drawing:
        return cls(nodes={}, edges=[], waited=defaultdict(float), waiters=defaultdict(set),
                   holders_of={}, holder_shares_of={}, group_of_pid={}, request_groups=set(),
                   held_threads={}, group_tids={})


def _draw_knotted_masters(service: Service, views: list[ProcessView], across: list[Knot],
                          g: _Drawing) -> None:
    """A master's waits are left out of the graph (build_wait_graph), except its threads that
    are part of a knot across processes (a parent waiting for a child blocked on the parent's
    pipe): the knot's chain starts there, and drawn without them it would stop one hop short."""
    drawn = {v.pid for v in views}
    by_pid = {v.pid: v for v in service.processes if v.pid is not None}
    members: dict[int, set[int]] = defaultdict(set)
    for tied in across:
        for hop in tied.members:
            if hop.wait.thread.pid not in drawn:
                members[hop.wait.thread.pid].add(hop.wait.thread.tid)
    for pid, tids in members.items():
        view = by_pid.get(pid)
        if view is not None and view.analysis.kernel is not None:
            _draw_process(pid, view.role, view.analysis, view.analysis.kernel, g, only=tids)


def _draw_process(pid: int, role: ProcessRole, analysis: Analysis, kernel: KernelView,
                  g: _Drawing, only: set[int] | None = None) -> None:
    """One process's thread groups, each with the resources it waits on (`waits_for` edges),
    then its request tasks (_add_tasks). `only`: just the groups holding these threads."""
    window = analysis.os.window_s if analysis.os is not None else 0.0
    for group in _thread_groups(analysis, kernel):
        if only is not None and not only & set(group.tids):
            continue
        node_id = f"t:{pid}:{group.name}"
        g.nodes[node_id] = WaitNode(
            node_id, NodeKind.THREADS, _group_label(group, pid, role), pid,
            len(group.tids), site=_site(analysis, group.tids, group.running >= RUNS_MOSTLY),
            running_share=round(group.running, 4))
        g.group_tids[node_id] = group.tids
        # what serves a process's clients is its request threads, whichever group came first
        if pid not in g.group_of_pid or (group.role == ThreadRole.REQUEST
                                         and g.group_of_pid[pid] not in g.request_groups):
            g.group_of_pid[pid] = node_id
        if group.role == ThreadRole.REQUEST:
            g.request_groups.add(node_id)
        for obj, share in group.waits:
            resource_id = _resource_id(obj, pid)
            if resource_id not in g.nodes:
                named = _lock_name(analysis, group.tids) if obj is group.waits[0][0] else None
                label = (f"lock {named.name} ({named.file.rsplit('/', 1)[-1]}:{named.line})"
                         if named is not None and obj.resource == ResourceKind.LOCK else obj.label)
                g.nodes[resource_id] = WaitNode(resource_id, NodeKind.RESOURCE, label,
                                                None if _shared(obj) else pid,
                                                resource=obj.resource,
                                                detail=f"{obj.syscall}: {obj.key}")
            seconds = share * window * len(group.tids)
            g.edges.append(WaitEdge(node_id, resource_id, GraphEdgeKind.WAITS_FOR,
                                    round(share, 4), round(seconds, 3)))
            g.waited[resource_id] += seconds
            g.waiters[resource_id].add(node_id)
            if obj.holders:
                g.holders_of[resource_id] = obj.holders
                g.holder_shares_of[resource_id] = obj.holder_shares
    if only is None:
        _add_tasks(pid, role, analysis, window, g.nodes, g.edges, g.waited, g.waiters,
                   g.held_threads, g.group_tids)


def _draw_holders(g: _Drawing, servers: Mapping[int, ServerProcess]) -> None:
    """Who holds or serves what: the kernel's own holders (file locks, pipes, children, the local
    processes listening where a socket leads)."""
    for resource_id, pids in g.holders_of.items():
        kind = g.nodes[resource_id].resource
        edge_kind = GraphEdgeKind.HELD_BY if kind == ResourceKind.FILE_LOCK else GraphEdgeKind.SERVED_BY
        shares = g.holder_shares_of.get(resource_id, ())
        for i, pid in enumerate(pids[:4]):
            target = g.group_of_pid.get(pid)
            if target is None:
                target = f"p:{pid}"
                g.nodes.setdefault(target, _process_node(target, pid, servers.get(pid)))
            g.edges.append(WaitEdge(resource_id, target, edge_kind, shares[i] if i < len(shares) else 0.0))


def _lock_peers(views: list[ProcessView], g: _Drawing) -> dict[str, tuple[str, float]]:
    """A lock whose waiters take turns on a process outside (a sidecar behind a pipe): held, in
    turn, by the thread on that process; lock -> resource id of the pipe and its occupancy."""
    peers: dict[str, tuple[str, float]] = {}
    nodes, edges = g.nodes, g.edges
    for view in views:
        lock_waiters: dict[str, list[str]] = defaultdict(list)
        for edge in edges:
            if (edge.kind == GraphEdgeKind.WAITS_FOR and nodes[edge.target].resource == ResourceKind.LOCK
                    and nodes[edge.source].pid == view.pid):
                lock_waiters[edge.target].append(edge.source)
        for lock_id, groups in lock_waiters.items():
            tids = [t for grp in groups for t in g.group_tids.get(grp, ())]
            peer = serving_peer(view.analysis.kernel, tids)
            if peer is not None and peer.occupancy >= PEER_OCCUPANCY:
                peer_id = _resource_id(peer.resource, view.pid or 0)
                if peer_id in nodes:
                    peers[lock_id] = (peer_id, peer.occupancy)
                    for waiter in groups:
                        edges.append(WaitEdge(lock_id, waiter, GraphEdgeKind.HELD_BY))
    return peers


def _knots(views: list[ProcessView], across: list[Knot],
           g: _Drawing) -> tuple[list[tuple[str, ...]], list[str]]:
    """The knots as the graph's nodes, and each one's chain in words ("" for a lock knot): the
    lock knots first (_lock_knots), then knots of any resource (model/knots.py: a lock holder
    waiting for a future its job needs, a parent waiting for a child blocked on its pipe), each
    process's and the tree's; a knot of locks alone is the lock cycle the deadlock check
    reports (or a lock knot)."""
    nodes, group_tids = g.nodes, g.group_tids
    knots = _lock_knots(views, g)
    chains = [""] * len(knots)  # the knot's chain in words; "" for a lock knot
    found = [k for v in views for k in v.analysis.knots if not k.only_locks] + across
    for tied in found:
        members = {(h.wait.thread.pid, h.wait.thread.tid) for h in tied.members}
        ids = [n.id for n in nodes.values() if n.kind == NodeKind.THREADS and n.pid is not None
               and any((n.pid, t) in members for t in group_tids.get(n.id, ()))]
        ids += [e.target for e in g.edges if e.source in ids and e.kind == GraphEdgeKind.WAITS_FOR]
        drawn = {nodes[i].pid for i in ids}
        ids += [f"p:{pid}" for pid in tied.pids if pid not in drawn]  # a process with no node of its threads
        marked = tuple(dict.fromkeys(i for i in ids if i in nodes))
        if marked:
            knots.append(marked)
            chains.append(chain_words(tied))
    return knots, chains


def _lock_knots(views: list[ProcessView], g: _Drawing) -> list[tuple[str, ...]]:
    """Each process's threads blocked all window on locks while nothing in it runs (lock_knot):
    the thread nodes of the knot's own threads (not the process's other threads) and its locks."""
    knots = []
    for view in views:
        knot = lock_knot(view.analysis.kernel, view.analysis.os,
                         knot_candidates(view.analysis.samples, view.analysis.threads))
        if knot is not None:
            ids = [n.id for n in g.nodes.values() if n.pid == knot.pid and n.kind == NodeKind.THREADS
                   and set(g.group_tids.get(n.id, ())) & set(knot.tids)]
            ids += [_resource_id(lock, knot.pid) for lock in knot.locks]
            knots.append(tuple(i for i in ids if i in g.nodes))
    return knots


@dataclass(frozen=True)
class _Group:
    name: str
    role: str
    tids: tuple[int, ...]
    running: float  # mean share of ticks on a CPU
    waits: tuple[tuple[WaitObject, float], ...]  # mean share of ticks per object


def _thread_groups(analysis: Analysis, kernel: KernelView) -> list[_Group]:
    """Threads grouped by their role and what they waited on most (idle threads and library
    threads left out: they wait for work, not for each other)."""
    roles = {int(r.tid): str(r.role) for r in analysis.threads.itertuples()}
    grouped: dict[tuple[str, str], list[int]] = defaultdict(list)
    objects = {tid: _named_objects(analysis, tid, waits.objects) for tid, waits in kernel.threads.items()}
    for tid in kernel.threads:
        role = roles.get(tid, ThreadRole.OTHER)
        if role in (ThreadRole.IDLE, ThreadRole.LIBRARY):
            continue
        blocking = [(o, n) for o, n in objects[tid]
                    if o.blocking not in (Blocking.RUNNING, Blocking.IDLE)]
        if not blocking:
            continue
        top = blocking[0][0]
        if top.resource == ResourceKind.SLEEP and role != ThreadRole.REQUEST:
            continue  # a housekeeping thread's sleep loop
        grouped[(role, top.key)].append(tid)
    out = []
    for (role, key), tids in grouped.items():
        shares: dict[WaitObject, float] = defaultdict(float)
        running = 0.0
        for tid in tids:
            seen = max(1, kernel.ticks.get(tid, kernel.threads[tid].observations))
            for obj, n in objects[tid]:
                if obj.blocking == Blocking.RUNNING:
                    continue
                shares[obj] += n / seen / len(tids)
            running += kernel.blocked_share(tid, Blocking.RUNNING) / len(tids)
        kept = tuple(sorted(((o, s) for o, s in shares.items() if s >= MIN_EDGE_SHARE
                             and o.blocking != Blocking.IDLE), key=lambda p: -p[1]))
        if kept:
            out.append(_Group(f"{role}:{key}", role, tuple(sorted(tids)), min(1.0, running), kept))
    return out


def _named_objects(analysis: Analysis, tid: int,
                   objects: tuple[tuple[WaitObject, int], ...]) -> list[tuple[WaitObject, int]]:
    """The thread's objects with its waits on a Condition named as the condition (each waiter
    sleeps on a lock of its own: model/condition_waits.py), most observed first."""
    counts: dict[WaitObject, int] = defaultdict(int)
    for obj, n in objects:
        counts[analysis.condition_waits.rename(tid, obj)] += n
    return sorted(counts.items(), key=lambda pair: -pair[1])


def _group_label(group: _Group, pid: int, process_role: ProcessRole) -> str:
    """"worker 4711: 3 request threads": the process first, so a narrow box still names it."""
    who = _PROCESS_WORDS.get(process_role, "process")
    kind = "request thread" if group.role == ThreadRole.REQUEST else "thread"
    count = len(group.tids)
    return f"{who} {pid}: {count} {kind}{'s' if count > 1 else ''}"


def _site(analysis: Analysis, tids: tuple[int, ...], running: bool = False) -> str:
    """The code where these threads waited most: the site of their most frequent wait; for
    threads that mostly ran (a backend's busy thread that serves the others), where they ran."""
    samples = analysis.samples
    rows = samples[samples["tid"].isin(tids) & (samples["site"] >= 0)
                   & (samples["state"].isin(RUNNING) if running else ~samples["state"].isin(RUNNING))]
    if rows.empty:
        return ""
    site = int(rows.groupby("site")["count"].sum().idxmax())
    frame = analysis.frame(site)
    return f"{frame.function} {frame.file.rsplit('/', 1)[-1]}:{frame.line}"


def _lock_name(analysis: Analysis, tids: tuple[int, ...]) -> LockSite | None:
    """The Python lock these threads waited on most, as their source takes it (`with NAME:` or
    `NAME.acquire()` at their most sampled lock-wait line); None where the source is unreadable
    or the line takes no lock (a native mutex)."""
    samples = analysis.samples
    rows = samples[samples["tid"].isin(tids) & (samples["site"] >= 0)
                   & (samples["state"] == ThreadState.LOCK)]
    if rows.empty:
        return None
    frame = analysis.frame(int(rows.groupby("site")["count"].sum().idxmax()))
    return acquired_at(frame.file, frame.line)


def _shared(obj: WaitObject) -> bool:
    """Resources one key names across processes (the kernel's objects)."""
    return obj.key.startswith(("file:", "pipe:", "futex:shared:", "socket:"))


def _resource_id(obj: WaitObject, pid: int) -> str:
    return f"r:{obj.key}" if _shared(obj) or f":{pid}" in obj.key else f"r:{pid}:{obj.key}"


def _bottleneck(nodes: dict[str, WaitNode], edges: list[WaitEdge], waited: dict[str, float],
                waiters: dict[str, set[str]], holders_of: dict[str, tuple[int, ...]],
                knots: list[tuple[str, ...]], peers: dict[str, tuple[str, float]],
                servers: Mapping[int, ServerProcess], chains: list[str]) -> tuple[str | None, str]:
    if knots:
        knot = knots[0]
        threads = sum(nodes[i].threads for i in knot if nodes[i].kind == NodeKind.THREADS)
        locks = [i for i in knot if nodes[i].kind == NodeKind.RESOURCE]
        pid = next((nodes[i].pid for i in knot if nodes[i].pid is not None), None)
        if chains[0]:  # a knot of any resource: its chain
            return (locks[0] if locks else None,
                    f"hang: {chains[0]}; none of them runs, and none will again")
        return (locks[0] if locks else None,
                f"hang: {threads} threads of process {pid} blocked all window on {len(locks)} "
                f"locks, and nothing in the process ran to release them")
    # a pipe or a child counts only where another process serves it (a self-pipe is a wake-up),
    # a socket only where a local process does (a remote one is outside the chain's reach)
    served_kinds = (ResourceKind.PIPE, ResourceKind.CHILD, ResourceKind.SOCKET)
    candidates = [(seconds, rid) for rid, seconds in waited.items()
                  if nodes[rid].resource in HELD_RESOURCES + (ResourceKind.SOCKET,) and seconds > 0
                  and (nodes[rid].resource not in served_kinds or holders_of.get(rid))]
    if not candidates:
        return None, ""
    seconds, rid = max(candidates)
    node = nodes[rid]
    served = peers.get(rid)
    if served is not None:
        # The lock's waiters take turns on a process outside: that process is the bottleneck.
        peer_id, occupancy = served
        count = sum(nodes[w].threads for w in waiters[rid])
        return peer_id, (f"{count} threads wait for {node.label} while one of them at a time "
                         f"waits for {nodes[peer_id].label} ({min(1.0, occupancy):.0%} of the "
                         f"window): the process at its other end serves them one request at a time")
    count = sum(nodes[w].threads for w in waiters[rid])
    tasks = all(nodes[w].kind == NodeKind.TASKS for w in waiters[rid])
    noun = "request tasks" if tasks else "threads"
    processes = len({nodes[w].pid for w in waiters[rid]})
    who = (f"{count} {noun} in {processes} processes" if processes > 1
           else f"{'on average ' if tasks else ''}{count} {noun if count > 1 or tasks else 'thread'}")
    held = holders_of.get(rid, ())
    verb = "held by" if node.resource in (ResourceKind.FILE_LOCK, ResourceKind.LOCK) else "served by"
    waiting_pids = {nodes[w].pid for w in waiters[rid]}
    if held and set(held) <= waiting_pids:
        # the waiters hold it in turn: they serialise on it, there is no holder beyond them
        holder = f", held in turn by the waiters themselves (process {', '.join(map(str, held[:3]))})"
    elif node.resource == ResourceKind.SOCKET:
        holder = _server_words(held, servers)
    else:
        holder = f", {verb} process {', '.join(map(str, held[:3]))}" if held else ""
        holder += _holder_chain(rid, nodes, edges)
    unit = "task-seconds" if tasks else "thread-seconds"
    return rid, f"{who} wait for {node.label} ({seconds:.1f} {unit}){holder}"


def _process_node(node_id: str, pid: int, server: ServerProcess | None) -> WaitNode:
    """A process outside the service's threads: a server read beside it says its load."""
    if server is None:
        return WaitNode(node_id, NodeKind.PROCESS, f"process {pid}", pid)
    label = f"server {pid} · {server.cpu_cores:.2f} cores"
    return WaitNode(node_id, NodeKind.PROCESS, label, pid, server.threads,
                    detail=(f"{server.program}; " if server.command else "")
                    + f"busiest thread {server.busiest_thread_cores:.2f} cores"
                           + (f"; waits on {server.top_wait} {server.top_wait_share:.0%}"
                              if server.top_wait else ""))


def _server_words(held: tuple[int, ...], servers: Mapping[int, ServerProcess]) -> str:
    """", served by process 4711 (1.00 cores, its busiest thread 0.98), which waits on the GIL
    (40% of its threads' time)": the socket's local servers as /proc measured them."""
    read = [servers[p] for p in held if p in servers]
    if not read:
        return f", served by process {', '.join(map(str, held[:3]))}" if held else ""
    words = []
    for server in read[:3]:
        text = (f"process {server.pid} ({server.cpu_cores:.2f} cores, its busiest thread "
                f"{server.busiest_thread_cores:.2f})")
        if server.top_wait:
            text += f", which waits on {server.top_wait} ({server.top_wait_share:.0%} of its threads' time)"
        words.append(text)
    return ", served by " + "; ".join(words)


def _holder_chain(resource_id: str, nodes: dict[str, WaitNode], edges: list[WaitEdge]) -> str:
    """", held by 4 worker threads, which wait for socket to 127.0.0.1:9000 (93% of their
    time)": the threads holding the resource and what they themselves wait on most."""
    holders = [e.target for e in edges if e.source == resource_id and e.kind == GraphEdgeKind.HELD_BY
               and nodes[e.target].kind == NodeKind.THREADS]
    if not holders:
        return ""
    threads = sum(nodes[h].threads for h in holders)
    onward = sorted((e for e in edges if e.source in holders and e.kind == GraphEdgeKind.WAITS_FOR
                     and e.target != resource_id), key=lambda e: -e.share)
    words = f", held by {threads} thread{'s' if threads > 1 else ''}"
    if nodes[holders[0]].site:
        words += f" in {nodes[holders[0]].site}"
    if onward:
        words += f", which wait for {nodes[onward[0].target].label} ({onward[0].share:.0%} of their time)"
    return words


# The asyncio primitives tasks queue on, as graph resources: a capacity (its holders are tasks or
# threads) or another in-process object.
_CAPACITY_KINDS = (AwaitKind.CAPACITY, AwaitKind.SEMAPHORE, AwaitKind.LOCK)
MIN_TASKS_WAITING = 0.5


def _add_tasks(pid: int, role: ProcessRole, analysis: Analysis, window: float,
               nodes: dict[str, WaitNode], edges: list[WaitEdge], waited: dict[str, float],
               waiters: dict[str, set[str]], held_threads: dict[str, list[str]],
               group_tids: dict[str, tuple[int, ...]]) -> None:
    """The process's request tasks parked on in-process primitives (the task reader's await
    sites), and for a framework's capacity the worker threads that hold its tokens."""
    summary = analysis.await_sites
    if summary is None:
        return
    who = _PROCESS_WORDS.get(role, "process")
    for site in summary.sites:
        if not site.local or site.waiting_avg < MIN_TASKS_WAITING:
            continue
        where = f"{site.function} {site.file.rsplit('/', 1)[-1]}:{site.line}"
        resource_id = f"r:{pid}:await:{site.file}:{site.line}"
        capacity = f" ({site.capacity} tokens)" if site.capacity else ""
        label = f"{site.kind} {site.name}".strip() + capacity
        nodes[resource_id] = WaitNode(
            resource_id, NodeKind.RESOURCE, label, pid,
            resource=ResourceKind.CAPACITY if site.kind in _CAPACITY_KINDS else ResourceKind.OTHER,
            site=where, detail=site.detail)
        task_id = f"k:{pid}:{site.file}:{site.line}"
        waiting = max(1, round(site.waiting_avg))
        nodes[task_id] = WaitNode(task_id, NodeKind.TASKS, f"{who} {pid}: {waiting} request tasks",
                                  pid, waiting, site=where)
        seconds = site.waiting_avg * window
        edges.append(WaitEdge(task_id, resource_id, GraphEdgeKind.WAITS_FOR, round(site.share, 4),
                              round(seconds, 3)))
        waited[resource_id] += seconds
        waiters[resource_id].add(task_id)
        if site.kind == AwaitKind.CAPACITY:
            held_threads[resource_id] = _worker_nodes(pid, analysis, nodes, group_tids)


def _worker_nodes(pid: int, analysis: Analysis, nodes: dict[str, WaitNode],
                  group_tids: dict[str, tuple[int, ...]]) -> list[str]:
    """The thread nodes of the framework's worker threads (their stacks run its worker loop):
    the groups already drawn for them, else one node for all of them."""
    profile = analysis.profile
    loop = np.array([any(frame_is(f, suffix, pattern) for suffix, pattern in WORKER_LOOP_FRAMES)
                     for f in profile.frames], dtype=bool)
    if not loop.any():
        return []
    samples = analysis.samples
    rows = samples[profile.stacks_with_any(loop)[samples["stack"].to_numpy()]]
    tids = {int(t) for t in rows["tid"].unique()}
    if not tids:
        return []
    drawn = [n.id for n in nodes.values() if n.kind == NodeKind.THREADS and n.pid == pid
             and set(group_tids.get(n.id, ())) & tids]
    if drawn:
        return drawn
    node_id = f"t:{pid}:workers"
    kernel = analysis.kernel
    running = (sum(kernel.blocked_share(t, Blocking.RUNNING) for t in tids) / len(tids)
               if kernel is not None else None)
    nodes[node_id] = WaitNode(node_id, NodeKind.THREADS, f"process {pid}: {len(tids)} worker threads",
                              pid, len(tids), running_share=None if running is None else round(running, 4))
    return [node_id]


def _keep(nodes: dict[str, WaitNode], edges: list[WaitEdge], bottleneck: str | None) -> set[str]:
    """At most MAX_NODES nodes: those on the heaviest edges first, the bottleneck always."""
    weight: dict[str, float] = defaultdict(float)
    for edge in edges:
        weight[edge.source] += edge.thread_seconds
        weight[edge.target] += edge.thread_seconds
    ranked = sorted(nodes, key=lambda n: (n != bottleneck, -weight.get(n, 0.0), n))
    kept = set(ranked[:MAX_NODES])
    # a node is drawn only with an edge
    linked = {e.source for e in edges} | {e.target for e in edges}
    return {n for n in kept if n in linked}
