"""Chains of waits that start at asyncio request tasks: a task awaiting a future that worker
threads resolve (run_in_executor, asyncio.to_thread, a ThreadPoolExecutor), or a capacity
limiter whose tokens worker threads hold (AnyIO's: FastAPI `def` endpoints), waits on those
threads; what they wait on in turn is their own chain (model/chains.py, from the kernel).

A suspended task is on no thread's stack: the event loop's thread sleeps in its selector, and
the kernel alone reads that as waiting for work. The task reader names the await site and its
kind (model/await_sites.py), the stacks name the worker threads (model/worker_threads.py), and
the kernel says what the workers wait on. The chain ends at the worker threads when every one
is taken and what they wait on is no limit of its own (a sleep, an address outside, a server
below its capacity): more workers serve more requests at once. Where their wait ends at a limit
(a server at capacity, a lock's or the GIL's holder, the quota), the chain ends there.
"""

from __future__ import annotations

from dataclasses import replace

from diagnose.model.chains import AT_CAPACITY, FOLLOW_SHARE, Chain, Hop
from diagnose.model.worker_threads import ThreadHolders
from diagnose.report.model.sections import ProcessTasks, TaskAwaitSite
from diagnose.vocab import AwaitKind, ChainEnd, ResourceKind

EXECUTOR_BUSY = 0.8  # of the worker threads, busy on average: every one of them is taken
# Ends past the workers that are a limit of their own: more workers queue there.
LIMITS = (ChainEnd.LOCK_HOLDER, ChainEnd.GIL_HOLDER, ChainEnd.CPU_QUOTA, ChainEnd.KNOT, ChainEnd.CYCLE,
          ChainEnd.CHILD)
_HANDED_TO_THREADS = {AwaitKind.FUTURE: ResourceKind.FUTURE, AwaitKind.CAPACITY: ResourceKind.CAPACITY}


def all_taken(workers: ThreadHolders) -> bool:
    """Every worker thread is busy (not waiting for work), on average."""
    return workers.threads > 0 and workers.busy_avg >= EXECUTOR_BUSY * workers.threads


def task_chains(tasks: ProcessTasks | None, workers: ThreadHolders | None,
                thread_chains: tuple[Chain, ...], window_s: float) -> tuple[Chain, ...]:
    """The request tasks' chain through the worker threads, at their top in-process await site
    where that hands work to threads; none where the tasks were not read or no worker thread
    was seen."""
    if tasks is None or workers is None or not workers.threads or not tasks.local_sites:
        return ()
    site = tasks.local_sites[0]
    resource = _HANDED_TO_THREADS.get(site.kind)
    if resource is None:
        return ()
    first = Hop(resource, _label(site), workers=workers.threads,
                workers_busy=round(workers.busy_avg, 2))
    hops, end = _past_the_workers(workers, thread_chains)
    return (Chain((), window_s, (first, *hops), end, tasks=site.waiting_avg, task_share=site.share),)


def _label(site: TaskAwaitSite) -> str:
    what = "futures" if site.kind == AwaitKind.FUTURE else "a capacity limiter's tokens"
    call = f" `{site.name}`" if site.name else ""
    return f"{what}{call} at {site.function} ({site.file.rsplit('/', 1)[-1]}:{site.line})"


def _past_the_workers(workers: ThreadHolders, thread_chains: tuple[Chain, ...]) -> tuple[tuple[Hop, ...], ChainEnd]:
    """The hops the workers' own most-waited chain adds, and where the tasks' chain ends."""
    taken = all_taken(workers)
    theirs = [(c.among(workers.tids), c) for c in thread_chains]
    theirs = [(mine, whole) for mine, whole in theirs if mine.waiters]
    if not theirs:
        return (), ChainEnd.WORKER_THREADS if taken else ChainEnd.UNKNOWN
    mine, whole = max(theirs, key=lambda pair: pair[0].seconds)
    # of every worker's time, not only of those that waited there
    share = sum(w.share for w in mine.waiters) / workers.threads
    if share < FOLLOW_SHARE:  # the workers mostly run: the end is theirs
        return (), ChainEnd.WORKER_THREADS if taken else ChainEnd.UNKNOWN
    hops = (replace(whole.hops[0], share=round(share, 4)), *whole.hops[1:])
    at_limit = whole.end in LIMITS or (whole.end == ChainEnd.LOCAL_SERVER and whole.last.saturation >= AT_CAPACITY)
    if at_limit or not taken:
        return hops, whole.end
    return hops, ChainEnd.WORKER_THREADS
