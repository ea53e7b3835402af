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

Why it matters:
    The service is hung, not slow: none of these threads will ever run again, and every request
    that needs one of the locks joins the victims. Throughput on those threads is zero until the
    process is restarted; no setting, core or thread count changes that. This is why it ranks
    first whatever else is found (checks/arbiter.py).

What to do instead:
    Take the locks in one global order on every code path: the advice names the order (the
    cycle's locks sorted by name; any fixed order works if every path follows it) and the line
    that takes them against it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.base import (Finding, Site, make_finding, short_path)
from diagnose.model.kernel_waits import LockKnot
from diagnose.checks.shared_evidence import shared
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Evidence as E
from diagnose.checks.spec import Unit as U
from diagnose.model.await_graph import AwaitCycle, CycleTask, await_cycles
from diagnose.model.deadlock import Deadlock, kernel_knot, os_confirms
from diagnose.model.held_locks import LockSite

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "deadlock"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The service is deadlocked: threads wait for each other's locks"
    what: str = ("Threads blocked all window on locks, in a cycle where each waits for a lock another holds (read "
                 "from the `with` blocks and `acquire()` calls of their stacks' source).")
    advice: tuple[str, ...] = (
        ("Where one lock order is impractical, take the second lock with a timeout (`lock.acquire(timeout=...)`), "
         "release what you hold and retry, or merge the locks into one."),
        "An RLock does not prevent this: it lets the thread that holds it re-enter, never another thread.",
    )


EVIDENCE = {
    **shared("fix"),
    "deadlocked_threads": E("threads in the deadlock", U.THREADS),
    "victim_threads": E("threads queued behind it (victims)", U.THREADS),
    "deadlocked_tasks": E("asyncio tasks in an await cycle", U.NUMBER),
    "victim_tasks": E("asyncio tasks awaiting the cycle (victims)", U.NUMBER),
    # A knot the kernel alone shows: its holders and its waiters, which it cannot tell apart.
    "blocked_threads": E("threads blocked on the knot's locks (holders and waiters)", U.THREADS),
    "locks_in_cycle": E("locks in the cycle", U.TEXT),
    "lock_order": E("lock order to adopt", U.TEXT),
    # Only when the cycle closed inside the window (model/deadlock.Deadlock.formed_s).
    "formed_at_s": E("deadlocked since (into the window)", U.SECONDS),
    # The cycle itself, as the reports print it (jstack-like): not a row of the evidence list.
    "deadlocks": E("the deadlocks, thread by thread", U.TEXT, row=False),
    # A knot read from the kernel alone (model/wait_graph.lock_knot): the futexes waited on.
    "kernel_locks": E("locks the kernel saw the threads wait on (futex addresses)", U.TEXT),
    "process_cores": E("CPU the process used over the window (OS)", U.CORES),
}


def lock_words(site: LockSite) -> str:
    return f"{site.label} at {where(site)}"


def where(site: LockSite) -> str:
    return f"{short_path(site.file)}:{site.line}"


def deadlock_data(deadlock: Deadlock) -> dict[str, object]:
    """One deadlock as the JSON report carries it (docs/report-data.md)."""
    def lock(site: LockSite) -> dict[str, object]:
        return {"name": site.name, "qualified": site.qualified, "file": site.file,
                "line": site.line, "function": site.function, "taken": str(site.taken)}

    return {
        "threads": [{"thread": m.thread.name, "tid": m.thread.tid, "holds": lock(m.holds),
                     "waits_for": lock(m.waits_for), "held_by": m.held_by}
                    for m in deadlock.cycle],
        "victims": [{"thread": v.thread.name, "tid": v.thread.tid,
                     "waits_for": lock(v.thread.waits_for), "held_by": v.held_by}
                    for v in deadlock.victims],
        "lock_order": [s.qualified for s in deadlock.lock_order],
    }


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


def _task_site(task: CycleTask) -> dict[str, object]:
    site = task.site
    return {"name": f"task {task.name}", "qualified": f"task {task.name}",
            "file": site.file if site else "", "line": site.line if site else 0,
            "function": site.function if site else "", "taken": "await"}


def await_cycle_data(cycle: AwaitCycle) -> dict[str, object]:
    """An await cycle in the shape of a thread deadlock (deadlock_data), so every renderer prints
    it thread-dump style: each task "holds" its own result, which the previous task awaits, and
    waits for the next task's result at the line where it awaits it."""
    tasks = cycle.tasks
    by_id = {t.task_id: t for t in tasks}
    return {
        "threads": [{"thread": f"task {t.name}", "tid": None,
                     "holds": {**_task_site(t), "name": f"task {t.name}'s result",
                               "qualified": f"task {t.name}'s result"},
                     "waits_for": {**_task_site(t), "name": f"task {by_id[t.awaits].name}",
                                   "qualified": f"task {by_id[t.awaits].name}"},
                     "held_by": f"task {by_id[t.awaits].name}"} for t in tasks],
        "victims": [{"thread": f"task {name}", "tid": None} for name in cycle.victims],
        "lock_order": [],
        "kind": "await_cycle",
    }


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
    evidence: dict[str, object] = {
        "deadlocked_threads": 0, "deadlocked_tasks": len(names), "victim_threads": 0,
        "victim_tasks": victims,
        "locks_in_cycle": " -> ".join(f"task {t.name}" for t in first.tasks),
        "deadlocks": [await_cycle_data(c) for c in cycles],
        # The first advice as a knob: the await to remove (waiter -> awaited task).
        "fix": {"knob": "break_await", "value": f"task {breaker.name} -> task "
                                                f"{names[breaker.awaits]}"}}
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
    knot = kernel_knot(analysis) if not deadlocks else None
    if knot is not None:
        return _kernel_knot_finding(analysis, settings, knot)
    if not deadlocks:
        return make_finding(ID, settings, 0.0, "no threads were blocked all window on each "
                            "other's locks", {"deadlocked_threads": 0, "victim_threads": 0})
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
    evidence: dict[str, object] = {
        "deadlocked_threads": threads,
        "victim_threads": victims,
        "locks_in_cycle": locks,
        "lock_order": " before ".join(s.qualified for s in first.lock_order),
        "deadlocks": [deadlock_data(d) for d in deadlocks],
    }
    if formed is not None:
        evidence["formed_at_s"] = formed
    if len(first.cycle) > 1:
        # The first advice as a knob: take the first deadlock's locks in this order.
        evidence["fix"] = {"knob": "lock_order", "value": [s.qualified for s in first.lock_order]}
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
    evidence: dict[str, object] = {
        "blocked_threads": len(knot.tids),
        "kernel_locks": ", ".join(lock.label for lock in knot.locks),
        "process_cores": round(cores, 4)}
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


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run, uses=(Input.OS_COUNTERS,))
