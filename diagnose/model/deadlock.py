"""Deadlocks among threads: a cycle in the wait-for graph of threads blocked on locks.

A thread is blocked all window when every one of its samples is a lock wait (state `lock`, a
Lock or RLock acquire), at one acquire site, over the whole window (its samples span the window
where their instants are measured), and /proc agrees where it was read: the OS counters outrank
the samples, so a thread that accumulated CPU time over the window, or that /proc saw running,
is not blocked (it got the lock at some point and the samples missed it).

A deadlock often closes inside the window (the user attaches as the service stalls). While
every member of a cycle is blocked, each waits for a lock another member holds and none can
release one: from the instant the last member began to block, the cycle is a deadlock. So a
thread whose trailing run of lock waits (one site, the same locks held in every stack of the
run) lasts to the window's end can be a member too, when the instants are measured and:
- the run spans at least forming_span_s: max(MIN_FORMING_S, MIN_FORMING_SHARE of the window).
  A thread re-acquiring a contended lock in a loop shows waits at one site with running samples
  between: its trailing run is its last wait alone, mostly a fraction of a second. Not always:
  a Lock is unfair, and in a convoy one waiter can starve for seconds (seen: 2.4 s of a 4 s
  window, asleep to /proc). What keeps such a waiter out of a cycle is the graph (a convoy on
  locks taken in one order holds nothing the others wait for), not the span. A quarter of the
  window keeps a long window from resting a hang on its last second;
- /proc did not see it in state R after the run began (its per-tick states, dated; its CPU
  time cannot be dated and is not read).
The deadlock then says when it formed (Deadlock.formed_s: the latest start among its members).
Such a cycle must also hold one lock per member by name: when two members hold locks of one
identity (`self.lock` of two instances), the names cannot tell a deadlock from two threads
starving in a convoy on four locks, and only a cycle blocked all window is reported.
With unmeasured instants (laid end to end) no run can be dated: only threads blocked all window
form cycles. A thread blocked from some instant to the end that fails these can be a victim.

Each blocked thread waits for one lock (model/held_locks.waited_at: the `with`/`acquire()` at
its innermost application frame) and holds the locks its stack encloses (held_in_stack). An edge
T -> U says: T waits for a lock U holds, matched by the lock's identity (held_locks.LockSite).
A cycle of two or more blocked threads is a deadlock: none of them can ever run again. Blocked
threads that wait, directly or through other blocked threads, for a lock a deadlocked thread
holds are its victims: hung as surely, but not part of the cause.

The lock order the advice proposes is the locks of the cycle sorted by their resolved name
(LockSite.qualified: `Cache._lock` for `self._lock` in class Cache, then the identity): any
fixed order removes the cycle as long as every path follows it; alphabetical order is one a
reader can check without the report. The member
that breaks it is the one holding a later lock while waiting for an earlier one.

The locks are named from the source files the stacks name, read as the target sees them
(model/source.py): without them (an offline analysis on another machine) no lock is named and
no deadlock is found; a file edited since the target imported it can name the wrong lines.

A thread blocked on a lock its own stack holds is a cycle of one (a non-reentrant Lock taken
again, through a helper that takes it too), but only for a module-global lock (`file::NAME`): an
RLock's owner never blocks on it, and one global name is one object, whereas `self.lock` held
and `self.lock` waited for may be two instances of one class.

Not done: a cycle of one through an attribute or a local name (see above). Await cycles among
asyncio tasks (a task awaiting a task that awaits it) are found by model/await_graph.py from the
task reader's snapshots and reported by the same check; tasks waiting on an `asyncio.Lock` held
by another task are not (the reader does not record which task holds an asyncio lock).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.model.held_locks import LockSite, held_in_stack, waited_at
from diagnose.model.kernel_waits import LockKnot, knot_candidates, lock_knot
from diagnose.model.os_summary import ProcessOS
from diagnose.model.sampled import SampledProcess
from diagnose.vocab import ThreadState, WaitKind

MIN_BLOCKED_SAMPLES = 5  # fewer samples of a thread decide nothing
WINDOW_COVERAGE = 0.8  # measured instants: the thread's samples span this much of the window
# /proc: a blocked thread gets next to no CPU (py-spy's own reads of it cost a little).
MAX_BLOCKED_CPU_S = 0.02
MAX_BLOCKED_CPU_SHARE = 0.02  # of the window
MAX_RUNNING_OBSERVATIONS = 0.1  # share of /proc observations in state R
MIN_OS_OBSERVATIONS = 5
# A cycle closing mid-window: its members' trailing runs of waits span at least this long...
MIN_FORMING_S = 1.0
MIN_FORMING_SHARE = 0.25  # ...and this share of the window
FORMING_END_SLACK_S = 0.25  # a run "lasts to the window's end" when it ends this close to it
OS_CLOCK_MARGIN_S = 0.2  # /proc ticks this close to a run's start are not dated inside it
_LOCK_KINDS = (WaitKind.LOCK, WaitKind.RLOCK)


@dataclass(frozen=True)
class BlockedThread:
    """A thread blocked on one lock all window, and the locks its stack holds."""

    thread: int  # index into the analysis's thread summary
    tid: int
    name: str
    waits_for: LockSite
    holds: tuple[LockSite, ...]
    samples: int
    site_frame: int = -1  # frame id of the acquiring frame (the wait site's)
    # When its trailing run of waits began, in seconds into the window (measured instants);
    # None when it was blocked all window.
    since_s: float | None = None


@dataclass(frozen=True)
class CycleMember:
    """One thread of a deadlock: the lock it holds that the next member waits for, and the lock
    it waits for (held by the member before it... in the cycle's order, the next one's)."""

    thread: BlockedThread
    holds: LockSite  # as this thread took it (its own with/acquire line)
    waits_for: LockSite
    held_by: str  # the thread holding the lock it waits for


@dataclass(frozen=True)
class Victim:
    thread: BlockedThread
    held_by: str  # the thread holding the lock it waits for


@dataclass(frozen=True)
class Deadlock:
    cycle: tuple[CycleMember, ...]
    victims: tuple[Victim, ...]
    lock_order: tuple[LockSite, ...]  # the order to adopt, one site per lock
    breaker: CycleMember  # the member taking the locks against that order

    @property
    def threads(self) -> tuple[BlockedThread, ...]:
        return tuple(m.thread for m in self.cycle)

    @property
    def formed_s(self) -> float | None:
        """When the cycle closed, in seconds into the window: the latest start of its members'
        waits (from then on none of them can release a lock); None when every member was
        blocked all window (it was deadlocked before the window began)."""
        starts = [m.thread.since_s for m in self.cycle if m.thread.since_s is not None]
        return max(starts) if starts else None


def forming_span_s(window_s: float) -> float:
    """The shortest trailing run of waits that can close a cycle mid-window (module docstring)."""
    return max(MIN_FORMING_S, MIN_FORMING_SHARE * window_s)


def blocked_threads(analysis: SampledProcess) -> tuple[list[BlockedThread], list[BlockedThread]]:
    """(threads that can be in a cycle, threads that can only be victims): see the module's
    docstring. The first are blocked on one lock all window, or (measured instants) from an
    instant of the window to its end over at least forming_span_s, every stack of that run
    holding the same locks, with /proc seeing them not run since (`since_s` says when the run
    began); the others are blocked from some instant to the window's end, queued behind the
    first during the window, or seen running in it."""
    samples = analysis.samples
    if samples.empty:
        return [], []
    profile = analysis.profile
    window = profile.window_s or 0.0  # 0: not measured (no timestamps)
    measured = bool(profile.instants == "measured" and window)
    state = samples["state"].to_numpy()
    kind = samples["wait_kind"].to_numpy()
    waiting = (state == ThreadState.LOCK) & np.isin(kind, _LOCK_KINDS)
    counts, sites, times = (samples["count"].to_numpy(), samples["site"].to_numpy(),
                            samples["t"].to_numpy())
    eligible: list[BlockedThread] = []
    since: list[BlockedThread] = []
    for thread, rows in samples.groupby("thread", sort=True).indices.items():
        # The thread's trailing run of lock waits at one site (rows are in sampling order): a
        # wait at another site before it (the outer lock, then the inner one) ended when the
        # thread got that lock.
        if not len(rows) or not waiting[rows[-1]]:
            continue
        other = np.flatnonzero(~waiting[rows] | (sites[rows] != sites[rows[-1]]))
        run = rows[other[-1] + 1:] if len(other) else rows
        count = int(counts[run].sum())
        run_sites = np.unique(sites[run])
        if count < MIN_BLOCKED_SAMPLES or len(run_sites) != 1 or run_sites[0] < 0:
            continue
        t = times[run]
        if measured and (np.isnan(t).any() or t.max() < WINDOW_COVERAGE * window):
            continue  # the thread was gone, or its last samples were not waits, before the end
        all_window = len(run) == len(rows) and (
            not measured or (t.max() - t.min()) >= WINDOW_COVERAGE * window - 2 * profile.interval_s)
        row = analysis.threads.loc[thread]
        tid = int(row["tid"])
        # /proc saw a thread with only waits in its samples run: it got the lock between
        # samples (a convoy sampled sparsely), so it was not blocked all window, and its run
        # cannot be dated to close a cycle; its last wait can still be behind a deadlock.
        ran = all_window and not _os_agrees(analysis.os, tid)
        all_window = all_window and not ran
        found = _locks_of(analysis, np.unique(samples["stack"].to_numpy()[run]), int(run_sites[0]))
        if found is None:
            continue
        waits_for, holds, uniform = found
        start = float(t.min()) if measured else None
        forming = (not all_window and not ran and measured and uniform and start is not None
                   and t.max() >= window - max(FORMING_END_SLACK_S, 2 * profile.interval_s)
                   and t.max() - start >= forming_span_s(window)
                   and _os_quiet_since(analysis.os, tid, start + profile.origin_s))
        blocked = BlockedThread(int(thread), tid, str(row["name"]), waits_for, holds, count,
                                int(run_sites[0]), None if all_window else start)
        (eligible if all_window or forming else since).append(blocked)
    return eligible, since


def _os_agrees(os_: ProcessOS | None, tid: int) -> bool:
    """/proc did not see the thread run: no CPU time to speak of, rarely in state R."""
    if os_ is None:
        return True
    thread = os_.threads.get(tid)
    if thread is None:
        return True
    if thread.cpu_s > max(MAX_BLOCKED_CPU_S, MAX_BLOCKED_CPU_SHARE * (os_.window_s or 0.0)):
        return False
    seen = sum(thread.state_counts.values())
    if seen < MIN_OS_OBSERVATIONS:
        return True
    # State R is running or waiting for a core. A blocked thread woken by an observer's stop
    # (a native sample) waits for a core before it sleeps again, long on a loaded machine: the
    # share of the window it spent on the run queue (schedstat) is not running.
    share = thread.state_counts.get("R", 0) / seen
    if thread.runqueue_wait_s and os_.window_s:
        share -= thread.runqueue_wait_s / os_.window_s
    return share <= MAX_RUNNING_OBSERVATIONS


def os_confirms(os_: ProcessOS | None, tid: int) -> bool:
    """/proc watched the thread through the window (enough observations) and did not see it
    run: the counters, not the number of stack samples, say it is blocked."""
    if os_ is None or tid not in os_.threads:
        return False
    return (sum(os_.threads[tid].state_counts.values()) >= MIN_OS_OBSERVATIONS
            and _os_agrees(os_, tid))


def _os_quiet_since(os_: ProcessOS | None, tid: int, start_s: float) -> bool:
    """/proc did not see the thread run after `start_s` (on the /proc clock): at most the share
    of state-R observations a blocked thread shows anyway (woken by py-spy's own reads). Ticks
    within OS_CLOCK_MARGIN_S of the start are not read: the clocks agree only that well, and a
    thread runs up to the lock it then blocks on. Its CPU time cannot be dated: not read."""
    if os_ is None:
        return True
    thread = os_.threads.get(tid)
    if thread is None:
        return True
    states = [tick.state for tick in thread.ticks if tick.t_s >= start_s + OS_CLOCK_MARGIN_S]
    if not states:
        return True
    # As in _os_agrees: a blocked thread an observer's stop woke waits for a core in state R
    # on a loaded machine; its share of the window on the run queue is not running.
    share = states.count("R") / len(states)
    if thread.runqueue_wait_s and os_.window_s:
        share -= thread.runqueue_wait_s / os_.window_s
    return share <= MAX_RUNNING_OBSERVATIONS


def _locks_of(analysis: SampledProcess, stack_ids: np.ndarray, site_frame: int
             ) -> tuple[LockSite, tuple[LockSite, ...], bool] | None:
    """(the lock waited for, the locks held, whether every stack holds the same locks) over a
    thread's distinct stacks: one waited lock for all of them, and the locks every one of them
    holds."""
    waited: LockSite | None = None
    held: dict[str, LockSite] | None = None
    uniform = True
    for sid in stack_ids.tolist():
        frames = [analysis.frame(f) for f in analysis.profile.stacks[int(sid)]]
        site = analysis.profile.innermost_index(int(sid), site_frame)
        if site < 0:
            return None
        lock = waited_at(frames, site)
        if lock is None or (waited is not None and lock.identity != waited.identity):
            return None
        waited = lock
        # Innermost first: the outermost acquisition of a lock taken twice (an RLock re-entered)
        # is the one kept, where the thread first took it.
        these = {s.identity: s for s in held_in_stack(frames, site)}
        uniform = uniform and (held is None or held.keys() == these.keys())
        held = these if held is None else {k: v for k, v in held.items() if k in these}
    if waited is None:
        return None
    return waited, tuple((held or {}).values()), uniform


def find_deadlocks(analysis: SampledProcess) -> tuple[Deadlock, ...]:
    """Every cycle among the blocked threads (one per strongly connected group), with its
    victims, in a deterministic order.

    Where the samples' timing cannot date a thread's block (its trailing run too short for a
    forming cycle, /proc seeing it on the run queue after an observer's stop on a loaded
    machine) but the kernel saw it asleep on a lock nearly every tick while nothing in the
    process ran (a knot: model/kernel_waits.lock_knot), the kernel is the witness: it joins the
    threads that can form a cycle. The source still says which lock each holds and waits for,
    so the cycle's members and its victims are told apart (a knot alone cannot say which of
    its threads hold the locks)."""
    eligible, since = blocked_threads(analysis)
    found = deadlocks_among(eligible, since)
    if found or not since:
        return found
    knot = kernel_knot(analysis)
    if knot is None:
        return found
    witnessed = [t for t in since if t.tid in knot.tids]
    return deadlocks_among(eligible + witnessed, [t for t in since if t.tid not in knot.tids])


def kernel_knot(analysis: SampledProcess) -> LockKnot | None:
    """The process's threads the kernel saw blocked on two locks or more all window while
    nothing ran (model/kernel_waits.lock_knot), among those that may be in one."""
    return lock_knot(analysis.kernel, analysis.os, knot_candidates(analysis.samples, analysis.threads))


def deadlocks_among(blocked: list[BlockedThread],
                    queued: list[BlockedThread] | tuple[BlockedThread, ...] = ()) -> tuple[Deadlock, ...]:
    """Cycles among the `blocked` threads (all window, or blocked long enough to the window's
    end: blocked_threads); victims among them and the `queued` ones (blocked from some instant
    to the window's end)."""
    everyone = list(blocked) + list(queued)
    holders: dict[str, list[BlockedThread]] = {}
    for t in everyone:
        for lock in t.holds:
            holders.setdefault(lock.identity, []).append(t)
    waits_on = {t.thread: [u.thread for u in holders.get(t.waits_for.identity, []) if u.thread != t.thread]
                for t in everyone}
    whole = {t.thread for t in blocked}
    edges = {t.thread: [u for u in waits_on[t.thread] if u in whole] for t in blocked}
    by_index = {t.thread: t for t in everyone}
    deadlocks: list[tuple[tuple[CycleMember, ...], tuple[LockSite, ...], CycleMember]] = []
    in_cycle: dict[int, int] = {}
    for group in strong_groups(edges):
        if len(group) < 2:
            continue
        cycle = cycle_in(min(group), edges, set(group))
        if cycle is None:
            continue
        members = []
        for i, index in enumerate(cycle):
            thread = by_index[index]
            previous = by_index[cycle[i - 1]]  # waits for a lock this thread holds
            nxt = by_index[cycle[(i + 1) % len(cycle)]]
            held = next(s for s in thread.holds if s.identity == previous.waits_for.identity)
            members.append(CycleMember(thread, held, thread.waits_for, nxt.name))
        order = _lock_order(members)
        if len(order) < len(members) and any(m.thread.since_s is not None for m in members):
            # Two members hold locks of one name (`self.lock` of two instances of a class): as
            # likely two transfers starving on four locks as one deadlock on two, and a thread
            # that waited a second in a convoy is no rarity. Only a cycle blocked all window
            # is called a deadlock on names alone.
            continue
        for index in cycle:
            in_cycle[index] = len(deadlocks)
        deadlocks.append((tuple(members), order, _breaker(members, order)))
    for t in blocked:
        if t.thread in in_cycle or not _global(t.waits_for):
            continue
        own = next((s for s in t.holds if s.identity == t.waits_for.identity), None)
        if own is not None:  # it waits for a lock it holds itself: a Lock taken twice
            member = CycleMember(t, own, t.waits_for, t.name)
            in_cycle[t.thread] = len(deadlocks)
            deadlocks.append(((member,), (own,), member))
    if not deadlocks:
        return ()
    victims: dict[int, list[Victim]] = {i: [] for i in range(len(deadlocks))}
    reached = dict(in_cycle)
    # Victims, nearest first: a blocked thread waiting for a lock a deadlocked thread (or an
    # earlier victim) holds.
    changed = True
    while changed:
        changed = False
        for t in everyone:
            if t.thread in reached:
                continue
            target = next((u for u in waits_on[t.thread] if u in reached), None)
            if target is not None:
                reached[t.thread] = reached[target]
                victims[reached[target]].append(Victim(t, by_index[target].name))
                changed = True
    return tuple(Deadlock(members, tuple(victims[i]), order, breaker)
                 for i, (members, order, breaker) in enumerate(deadlocks))


def _global(site: LockSite) -> bool:
    """A module-global lock: a bare name the function does not bind (`file::NAME`)."""
    return site.qualified.isidentifier()


def strong_groups(edges: dict[int, list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components, iteratively, in a stable order."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    groups: list[list[int]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            targets = edges.get(node, [])
            if i < len(targets):
                work.append((node, i + 1))
                nxt = targets[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            for target in targets:
                if target in on_stack:
                    low[node] = min(low[node], low[target])
            if low[node] == index[node]:
                group = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    group.append(top)
                    if top == node:
                        break
                groups.append(sorted(group))
    return sorted(groups)


def cycle_in(start: int, edges: dict[int, list[int]], group: set[int]) -> list[int] | None:
    """A simple cycle through `start` inside `group` (breadth-first: the shortest)."""
    parents: dict[int, int] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(edges.get(node, [])):
                if nxt not in group:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return list(reversed(path))
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    return None


def _lock_order(members: list[CycleMember]) -> tuple[LockSite, ...]:
    locks = {m.holds.identity: m.holds for m in members}
    return tuple(sorted(locks.values(), key=lambda s: (s.qualified, s.identity)))


def _breaker(members: list[CycleMember], order: tuple[LockSite, ...]) -> CycleMember:
    """The member that holds a later lock (in `order`) while waiting for an earlier one."""
    rank = {s.identity: i for i, s in enumerate(order)}
    against = [m for m in members
               if rank.get(m.holds.identity, 0) > rank.get(m.waits_for.identity, 0)]
    return (against or members)[0]
