"""deadlock: threads blocked on locks, each waiting for a lock another of them holds.

What it finds:
    A cycle in the wait-for graph of threads blocked on locks for the whole window, or from an
    instant of it to its end when the cycle closed while it was sampled (model/deadlock.py: the
    summary then says how many seconds into the window it formed): each thread of the cycle, the
    lock it holds (its name in the source and the line of the `with` or `acquire()` that took
    it) and the lock it waits for (the line where it waits), like a JVM thread dump's "Found one
    Java-level deadlock". The locks a thread holds are read from the source of its stack's
    frames (model/held_locks.py): the `with` blocks and unreleased `acquire()` calls that
    enclose each frame's line. Threads that queue behind the deadlocked locks are listed as its
    victims, not as a finding of their own; their waits, and the cycle's, are not counted as
    lock contention (checks/lock_contention.py leaves them out: shrinking a critical section
    does not unhang a service). Among asyncio tasks (read from the target's memory by attach),
    tasks that await each other in a cycle in every read of the window (model/await_graph.py):
    each task and the line where it awaits the next, and the tasks whose awaits lead into the
    cycle as its victims.

    A knot of any resources (model/knots.py): threads blocked all window, none of which ran
    (no running sample, next to no CPU by /proc), each waiting on something only the others can
    end — a lock its holder's stack holds, a future only the executor's busy workers can
    complete, a queue only they feed or drain, a child process, a pipe whose other end is held
    by their processes — within one process or across the service's processes. Reported with
    its chain, hop by hop: the thread, what it waits on and where, who serves that, and on
    around to the first thread ("request-0 waits for a future (cache.py:70), run by loader_0,
    which waits for FeatureCache._lock (cache.py:50), held by request-0"); the blocked threads
    whose waits lead into it are its victims. A knot of locks alone is the lock cycle above.

Why it matters:
    The service is hung, not slow: none of these threads will ever run again, and every request
    that needs one of the locks joins the victims. Throughput on those threads is zero until the
    process is restarted; no setting, core or thread count changes that. This is why it ranks
    first whatever else is found (checks/arbiter.py).

What to do instead:
    Take the locks in one global order on every code path: the advice names the order (the
    cycle's locks sorted by name; any fixed order works if every path follows it) and the line
    that takes them against it. For a knot, break one hop: never wait for a future while holding
    a lock its job takes (release the lock before `result()`); read a child's output while
    waiting for it (`communicate()`, not `wait()`, on a child writing to a pipe); otherwise the
    advice names the thread that waits while holding what another member needs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.base import (Finding, Site, make_finding, short_path)
from diagnose.model.kernel_waits import LockKnot
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import OMITTED, Measurements, Omitted
from diagnose.report.model.deadlocks import (CycleKind, DeadlockedThread, DeadlockVictim, ReportedDeadlock,
                                              ReportedLock)
from diagnose.report.model.findings import Fix
from diagnose.model.await_graph import AwaitCycle, CycleTask, await_cycles
from diagnose.model.deadlock import Deadlock, kernel_knot, os_confirms
from diagnose.model.held_locks import LockSite
from diagnose.model.knots import (Knot, Resource, ThreadId, Wait, at_words, chain_words, thread_words,
                                  tree_knots)
from diagnose.report.model.sections import CallSite

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.service import Service

ID = "deadlock"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The service is deadlocked: threads wait for each other's locks"
    # The title of a knot of other resources than locks (a future, a pipe, a child process).
    knot_title: str = "The service is deadlocked: threads wait on each other, none of them running"
    what: str = ("Threads blocked all window on locks, in a cycle where each waits for a lock another holds (read "
                 "from the `with` blocks and `acquire()` calls of their stacks' source); or, through any "
                 "resources (futures, queues, pipes, child processes), a set of threads none of which ran, "
                 "each waiting on something only the others can end.")
    advice: tuple[str, ...] = (
        ("Where one lock order is impractical, take the second lock with a timeout (`lock.acquire(timeout=...)`), "
         "release what you hold and retry, or merge the locks into one."),
        "An RLock does not prevent this: it lets the thread that holds it re-enter, never another thread.",
    )


@dataclass(frozen=True, kw_only=True)
class DeadlockEvidence(Measurements):
    deadlocked_threads: int = key("threads in the deadlock", U.THREADS)
    deadlocked_tasks: int | Omitted = key("asyncio tasks in an await cycle", U.NUMBER, optional=True)
    victim_threads: int = key("threads queued behind it (victims)", U.THREADS)
    victim_tasks: int | Omitted = key("asyncio tasks awaiting the cycle (victims)", U.NUMBER, optional=True)
    locks_in_cycle: str | Omitted = key("locks in the cycle", U.TEXT, optional=True)
    lock_order: str | Omitted = key("lock order to adopt", U.TEXT, optional=True)
    # A knot of any resources (model/knots.py): what its threads wait on, in the chain's order.
    knot_waits: str | Omitted = key("what the knot's threads wait on, in turn", U.TEXT, optional=True)
    # The cycle itself, as the reports print it (jstack-like): not a row of the evidence list.
    deadlocks: tuple[ReportedDeadlock, ...] | Omitted = key(
        "the deadlocks, thread by thread", U.TEXT, row=False, optional=True)
    # Only when the cycle closed inside the window (model/deadlock.Deadlock.formed_s).
    formed_at_s: float | Omitted = key("deadlocked since (into the window)", U.SECONDS, optional=True)
    fix: Fix | Omitted = shared_key(optional=True)
    # A knot that spans processes: which.
    knot_processes: str | Omitted = key("processes in the knot (pids)", U.TEXT, optional=True)


@dataclass(frozen=True, kw_only=True)
class KernelKnotEvidence(Measurements):
    # A knot the kernel alone shows (model/wait_graph.lock_knot): its holders and its waiters,
    # which it cannot tell apart, and the futexes waited on.
    blocked_threads: int = key("threads blocked on the knot's locks (holders and waiters)", U.THREADS)
    kernel_locks: str = key("locks the kernel saw the threads wait on (futex addresses)", U.TEXT)
    process_cores: float = key("CPU the process used over the window (OS)", U.CORES)


EVIDENCE = declarations(DeadlockEvidence, KernelKnotEvidence)


def lock_words(site: LockSite) -> str:
    return f"{site.label} at {where(site)}"


def where(site: LockSite) -> str:
    return f"{short_path(site.file)}:{site.line}"


def _lock(site: LockSite) -> ReportedLock:
    return ReportedLock(name=site.name, qualified=site.qualified, file=site.file, line=site.line,
                        function=site.function, taken=str(site.taken))


def deadlock_data(deadlock: Deadlock) -> ReportedDeadlock:
    """One deadlock as the report carries it (docs/report-data.md)."""
    return ReportedDeadlock(
        threads=tuple(DeadlockedThread(thread=m.thread.name, tid=m.thread.tid, holds=_lock(m.holds),
                                       waits_for=_lock(m.waits_for), held_by=m.held_by)
                      for m in deadlock.cycle),
        victims=tuple(DeadlockVictim(thread=v.thread.name, tid=v.thread.tid,
                                     waits_for=_lock(v.thread.waits_for), held_by=v.held_by)
                      for v in deadlock.victims),
        lock_order=tuple(s.qualified for s in deadlock.lock_order))


def order_advice(deadlock: Deadlock) -> str:
    if len(deadlock.cycle) == 1:
        (member,) = deadlock.cycle
        held, waited = member.holds, member.waits_for
        return (f"`{held.qualified}` is not reentrant: thread {member.thread.name} took it at "
                f"{where(held)} ({held.function}) and waits to take it again at {where(waited)} "
                f"({waited.function}). Do not take it twice on one path: split the locked function "
                f"into a wrapper that takes the lock and a helper that expects it held, or make it "
                f"a `threading.RLock`.")
    names = [s.qualified for s in deadlock.lock_order]
    order = " before ".join(f"`{n}`" for n in names)
    breaker = deadlock.breaker
    held, waited = breaker.holds, breaker.waits_for
    return (f"Take the locks in one order on every path: always take {order} (the order here "
            f"is alphabetical by the lock's name; any fixed order works as long as every path "
            f"follows it). Thread {breaker.thread.name} took `{held.qualified}` at {where(held)} "
            f"({held.function}) and then waits for `{waited.qualified}` at {where(waited)}: take "
            f"`{waited.qualified}` first there, or release `{held.qualified}` before taking it.")


def _task_site(task: CycleTask, label: str) -> ReportedLock:
    """`label` at the line where `task` awaits (both what it holds and what it waits for)."""
    site = task.site
    return ReportedLock(name=label, qualified=label, file=site.file if site else "",
                        line=site.line if site else 0, function=site.function if site else "",
                        taken="await")


def await_cycle_data(cycle: AwaitCycle) -> ReportedDeadlock:
    """An await cycle in the shape of a thread deadlock (deadlock_data), so every renderer prints
    it thread-dump style: each task "holds" its own result, which the previous task awaits, and
    waits for the next task's result at the line where it awaits it."""
    tasks = cycle.tasks
    by_id = {t.task_id: t for t in tasks}
    return ReportedDeadlock(
        threads=tuple(DeadlockedThread(thread=f"task {t.name}", tid=None,
                                       holds=_task_site(t, f"task {t.name}'s result"),
                                       waits_for=_task_site(t, f"task {by_id[t.awaits].name}"),
                                       held_by=f"task {by_id[t.awaits].name}") for t in tasks),
        victims=tuple(DeadlockVictim(thread=f"task {name}") for name in cycle.victims),
        kind=CycleKind.AWAIT_CYCLE)


def _await_cycle_finding(analysis: Analysis, settings: Settings, cycles: tuple[AwaitCycle, ...]) -> Finding:
    first = cycles[0]
    names = {t.task_id: t.name for t in first.tasks}
    victims = sum(len(c.victims) for c in cycles)
    sites = [Site(t.site.function, t.site.file, t.site.line, 1.0) for c in cycles for t in c.tasks
             if t.site is not None]
    awaits = ", ".join(f"{t.name} awaits {names[t.awaits]}"
                       + (f" ({short_path(t.site.file)}:{t.site.line})" if t.site else "")
                       for t in first.tasks)
    summary = (f"asyncio tasks await each other in a cycle ({awaits}) in all {first.snapshots} "
               f"reads over {first.seconds:.1f} s"
               + (f"; {victims} more tasks await them" if victims else "")
               + "; none of them will resume (hung, not slow)")
    # Removing any one await breaks the cycle; the advice names one (the edge that closes the
    # cycle in its recorded order), the summary lists them all.
    breaker = first.tasks[-1]
    advice = [f"Break the await cycle: task {breaker.name} must not await task "
              f"{names[breaker.awaits]}"
              + (f" at {short_path(breaker.site.file)}:{breaker.site.line} ({breaker.site.function})"
                 if breaker.site else "")
              + ": give it what it needs as an argument, or start it only after the task it "
                "waits for has finished.",
              f"Until the fix ships, restart the process: the {len(names) + victims} tasks "
              f"awaiting here will never resume."]
    evidence = DeadlockEvidence(
        deadlocked_threads=0, deadlocked_tasks=len(names), victim_threads=0, victim_tasks=victims,
        locks_in_cycle=" -> ".join(f"task {t.name}" for t in first.tasks),
        deadlocks=tuple(await_cycle_data(c) for c in cycles),
        # The first advice as a knob: the await to remove (waiter -> awaited task).
        fix=Fix("break_await", f"task {breaker.name} -> task {names[breaker.awaits]}"))
    return make_finding(ID, settings, 100.0, summary, evidence, sites, advice=advice,
                        gain=(None, "hung: no throughput ratio applies; the tasks in the cycle "
                                    "and those awaiting them never resume"),
                        # read counts, not samples of shares: a cycle present in every read
                        # of the window is no proportion with an interval
                        samples=None)


def run(analysis: Analysis, settings: Settings) -> Finding:
    deadlocks: tuple[Deadlock, ...] = analysis.deadlocks
    cycles = await_cycles(analysis.tasks) if analysis.tasks is not None else ()
    if not deadlocks and cycles:
        return _await_cycle_finding(analysis, settings, cycles)
    if not deadlocks:
        knots = tuple(k for k in analysis.knots if not k.only_locks)  # lock cycles: above
        if knots:
            return knot_finding(settings, knots, float(analysis.samples["count"].sum()))
    knot = kernel_knot(analysis) if not deadlocks else None
    if knot is not None:
        return _kernel_knot_finding(analysis, settings, knot)
    if not deadlocks:
        return make_finding(ID, settings, 0.0, "no threads were blocked all window on each "
                            "other's locks", DeadlockEvidence(deadlocked_threads=0, victim_threads=0))
    threads = sum(len(d.cycle) for d in deadlocks)
    victims = sum(len(d.victims) for d in deadlocks)
    first = deadlocks[0]
    locks = ", ".join(lock_words(m.holds) for m in first.cycle)
    count = "" if len(deadlocks) == 1 else f"{len(deadlocks)} deadlocks: "
    if len(first.cycle) == 1 and len(deadlocks) == 1:
        held = first.cycle[0].holds
        cycle = f"a thread waits for {held.qualified}, which it holds itself"
    else:
        cycle = (f"{threads} threads each hold a lock another of them waits for "
                 f"({', '.join(m.holds.qualified for m in first.cycle)})")
    formed = None if first.formed_s is None else round(first.formed_s, 2)
    summary = (f"{count}{cycle}"
               + (f" and {victims} more threads queue behind them" if victims else "")
               + "; none of them will run again (hung, not slow)"
               + (f"; deadlocked since about {formed:.1f} s into the window (the hang formed "
                  f"while it was sampled)" if formed is not None else ""))
    evidence = DeadlockEvidence(
        deadlocked_threads=threads, victim_threads=victims, locks_in_cycle=locks,
        lock_order=" before ".join(s.qualified for s in first.lock_order),
        deadlocks=tuple(deadlock_data(d) for d in deadlocks),
        formed_at_s=formed if formed is not None else OMITTED,
        # The first advice as a knob: take the first deadlock's locks in this order.
        fix=Fix("lock_order", [s.qualified for s in first.lock_order]) if len(first.cycle) > 1 else OMITTED)
    # Each cycle thread's wait site, with its share of all the threads' samples.
    total = max(1.0, float(analysis.samples["count"].sum()))
    sites = [Site(m.waits_for.function, m.waits_for.file, m.waits_for.line,
                  round(m.thread.samples / total, 4))
             for d in deadlocks for m in d.cycle]
    advice = [order_advice(d) for d in deadlocks]
    advice.append(f"Until the fix ships, restart the process: the {threads + victims} threads "
                  f"blocked here will never run again.")
    advice += list(settings.advice)
    samples = sum(m.thread.samples for d in deadlocks for m in d.cycle)
    finding = make_finding(ID, settings, 100.0, summary, evidence, sites, advice=advice,
                           gain=(None, "hung: no throughput ratio applies; the deadlocked threads "
                                       "and their victims serve nothing until the process restarts"),
                           samples=samples)
    # OS counters outrank sample counts: where /proc watched every thread of the cycle not run,
    # a short window's few dozen samples per thread do not make the hang uncertain.
    if all(os_confirms(analysis.os, m.thread.tid) for d in deadlocks for m in d.cycle):
        return dataclasses.replace(finding, low_confidence=False)
    return finding


def _kernel_knot_finding(analysis: Analysis, settings: Settings, knot: LockKnot) -> Finding:
    """A hang the kernel shows though the source cannot name the locks (a container's code the
    frames cannot be matched to, a lock taken in native code): threads blocked all window on
    two locks or more, and nothing in the process ran to let one go."""
    cores = analysis.os.cpu_s / analysis.os.window_s if analysis.os is not None and analysis.os.window_s else 0.0
    samples = analysis.samples[analysis.samples["tid"].isin(knot.tids)]
    sites: list[Site] = []
    total = max(1.0, float(samples["count"].sum()))
    with_site = samples[samples["site"] >= 0]
    if not with_site.empty:
        for frame_id, count in with_site.groupby("site")["count"].sum().nlargest(4).items():
            frame = analysis.frame(int(frame_id))
            sites.append(Site(frame.function, frame.file, frame.line, round(float(count) / total, 4)))
    where_ = (" at " + ", ".join(f"{s.function} ({short_path(s.file)}:{s.line})" for s in sites[:3])
              if sites else "")
    summary = (f"{len(knot.tids)} threads were blocked all window on {len(knot.locks)} locks{where_}, "
               f"and nothing in the process ran to release them (the kernel: every one asleep in a "
               f"futex wait, the process at {cores:.2f} cores); hung, not slow")
    # The kernel names the futexes each thread sleeps on, not which thread holds them: the
    # threads are counted as blocked, never as the cycle (its victims would count as members).
    evidence = KernelKnotEvidence(blocked_threads=len(knot.tids),
                                  kernel_locks=", ".join(lock.label for lock in knot.locks),
                                  process_cores=round(cores, 4))
    advice = ["Take the locks in one global order on every code path (the sites above are where "
              "the threads wait); where the source was readable the deadlock would be printed "
              "thread by thread: run `py-spy dump --locals --pid PID` to see which lock each "
              "thread holds.",
              f"Until the fix ships, restart the process: the {len(knot.tids)} threads blocked "
              f"here will never run again.", *settings.advice]
    finding = make_finding(ID, settings, 100.0, summary, evidence, sites, advice=advice,
                           gain=(None, "hung: no throughput ratio applies; the blocked threads "
                                       "serve nothing until the process restarts"),
                           samples=int(total))
    return dataclasses.replace(finding, low_confidence=False)


def run_service(service: Service, settings: Settings) -> Finding | None:
    """A knot spanning the service's processes (a parent waiting for a child that waits for the
    parent to read its pipe), which no process's own check can see; None when there is none."""
    processes = [(v.pid, v.analysis) for v in service.processes if v.pid is not None]
    knots = tuple(k for k in tree_knots(processes) if not k.only_locks)
    if not knots:
        return None
    return knot_finding(settings, knots, float(service.combined.samples["count"].sum()))


def _who(name: str, thread: ThreadId, knot: Knot) -> str:
    return thread_words(name, thread, knot)


def _at(at: CallSite | None) -> str:
    return at_words(at, short_path)


def knot_data(knot: Knot) -> ReportedDeadlock:
    """A knot as the report carries it, in the shape of a lock deadlock (deadlock_data), so
    every renderer prints it thread-dump style: each thread "holds" what the thread before it
    waits for (a lock, the job of a future, a child's exit, a pipe's end: `taken` says which
    resource), and waits for what the next one holds (`taken`: its kind of wait). `pid` names
    each thread's process."""
    def site(label: str, at: CallSite | None, kind: str) -> ReportedLock:
        return ReportedLock(name=label, qualified=label, file=at.file if at else "",
                            line=at.line if at else 0, function=at.function if at else "", taken=kind)

    def waits_for(wait: Wait) -> ReportedLock:
        return site(wait.label, wait.at, str(wait.resource))

    threads = []
    for hop in knot.members:
        wait = hop.wait
        serving = knot.serving(wait.thread)
        # the resource the member before it waits on, held by this one
        before = next((h.wait for h in knot.members if h.server.thread == wait.thread), wait)
        # where it holds it: the line that took it or runs it, else where it is (a process
        # holds its pipe's end and its exit wherever it waits)
        holds = site(serving.holds if serving is not None else "",
                     serving.at if serving is not None and serving.at is not None else wait.at,
                     str(before.resource))
        threads.append(DeadlockedThread(thread=_who(wait.name, wait.thread, knot), tid=wait.thread.tid,
                                        pid=wait.thread.pid, holds=holds, waits_for=waits_for(wait),
                                        held_by=_who(hop.server_name, hop.server.thread, knot)))
    victims = tuple(DeadlockVictim(thread=_who(v.wait.name, v.wait.thread, knot), tid=v.wait.thread.tid,
                                   pid=v.wait.thread.pid, waits_for=waits_for(v.wait),
                                   held_by=_who(v.server_name, v.server.thread, knot)) for v in knot.victims)
    return ReportedDeadlock(threads=tuple(threads), victims=victims, kind=CycleKind.KNOT)


def knot_advice(knot: Knot) -> str:
    """How to break the knot, at the hop its shape says: a lock held while waiting for a future
    its job needs; a child waited for while its pipe fills; otherwise the first member waiting
    while it holds what another needs."""
    members = knot.members
    for hop in members:
        wait = hop.wait
        held = knot.serving(wait.thread)
        lock_waiter = next((h for h in members if h.server.thread == wait.thread
                            and h.wait.resource == Resource.LOCK), None)
        if wait.resource == Resource.FUTURE and held is not None and lock_waiter is not None:
            lock = lock_waiter.wait
            return (f"Do not wait for a future while holding a lock its job needs: "
                    f"{_who(wait.name, wait.thread, knot)} holds `{lock.label}`"
                    f"{_taken(lock_waiter.server.at)} and waits for a future{_at(wait.at)} whose "
                    f"job runs on {_who(hop.server_name, hop.server.thread, knot)}"
                    + (f" ({hop.server.holds})" if hop.server.holds else "")
                    + f", which waits for `{lock.label}`{_at(lock.at)}. Release the lock before "
                      f"`result()` (submit under it if you must, wait outside it), or hand the job "
                      f"what it needs so it takes no lock.")
        if wait.resource == Resource.CHILD:
            child = next((h.wait for h in members if h.wait.thread.pid != wait.thread.pid
                          and h.wait.resource == Resource.PIPE_WRITE), None)
            if child is not None:
                return (f"Read the child's output while waiting for it: "
                        f"{_who(wait.name, wait.thread, knot)} waits for {wait.label}{_at(wait.at)} "
                        f"while the child blocks writing to {child.label.removesuffix(' (full)')}"
                        f"{_at(child.at)}, whose reading end only the parent holds and does not "
                        f"read (a pipe holds 64 KiB). Call `proc.communicate()` instead of "
                        f"`proc.wait()`, read the output to its end before waiting, or send it to "
                        f"a file.")
    first = knot.chain[0]
    wait = first.wait
    held = knot.serving(wait.thread)
    holding = f" while it holds {held.holds}{_taken(held.at)}" if held is not None else ""
    return (f"Break the knot at one hop: {_who(wait.name, wait.thread, knot)} waits for "
            f"{wait.label}{_at(wait.at)}{holding}, which "
            f"{_who(first.server_name, first.server.thread, knot)} needs to go on; release it "
            f"before waiting, or wait with a timeout and back off.")


def _taken(at: CallSite | None) -> str:
    return f" (taken at {short_path(at.file)}:{at.line}, {at.function})" if at is not None else ""


def knot_finding(settings: Settings, knots: tuple[Knot, ...], total_samples: float) -> Finding:
    """Threads knotted through any resources (model/knots.py): hung, with the chain."""
    first = knots[0]
    threads = sum(len(k.members) for k in knots)
    victims = sum(len(k.victims) for k in knots)
    pids = sorted({p for k in knots for p in k.pids})
    where = f" in {len(pids)} processes" if len(pids) > 1 else ""
    count = "" if len(knots) == 1 else f"{len(knots)} knots: "
    summary = (f"{count}{len(first.members)} threads{where} wait on each other and none of them ran "
               f"all window: {chain_words(first, short_path)}"
               + (f"; {victims} more threads wait behind them" if victims else "")
               + "; none of them will run again (hung, not slow)")
    evidence = DeadlockEvidence(deadlocked_threads=threads, victim_threads=victims,
                                knot_waits=" -> ".join(h.wait.label for h in first.chain),
                                deadlocks=tuple(knot_data(k) for k in knots),
                                knot_processes=", ".join(map(str, pids)) if len(pids) > 1 else OMITTED)
    total = max(1.0, total_samples)
    sites = [Site(h.wait.at.function, h.wait.at.file, h.wait.at.line, round(h.wait.samples / total, 4))
             for k in knots for h in k.members if h.wait.at is not None]
    restart = "the processes" if len(pids) > 1 else "the process"
    advice = [knot_advice(k) for k in knots]
    advice.append(f"Until the fix ships, restart {restart}: the {threads + victims} threads "
                  f"blocked here will never run again.")
    if settings.advice and any(h.wait.resource == Resource.LOCK for k in knots for h in k.members):
        advice.append(settings.advice[-1])  # an RLock does not help either
    finding = make_finding(ID, dataclasses.replace(settings, title=settings.knot_title), 100.0, summary,
                           evidence, sites, advice=advice,
                           gain=(None, "hung: no throughput ratio applies; the knotted threads and "
                                       "those waiting behind them serve nothing until restarted"),
                           samples=sum(h.wait.samples for k in knots for h in k.members))
    # every member was seen not to run by /proc (model/knots.blocked_threads): not a guess
    return dataclasses.replace(finding, low_confidence=False)


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run, uses=(Input.OS_COUNTERS,))
