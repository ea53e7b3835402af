"""async_wait: requests parked on an in-process asyncio primitive.

What it finds:
    The share of asyncio request tasks' time spent waiting on a primitive of the process itself
    (an `asyncio.Semaphore`, `Lock`, `Condition`, `Event`, `Queue.get`/`put`, or a future
    another task resolves, such as a batcher's), read from the tasks in the target's memory a
    few times a second (`attach`). Per await site (the innermost line of the application's own
    code above asyncio's frames): the primitive's kind, the name the code gives it there, its
    permits where readable, and the tasks waiting on average and at most. Request tasks are the
    tasks that run the application's code under the server framework's request handling (all
    tasks running the application's own code when no framework is seen); the server's own
    long-lived tasks and the application's background tasks (a batcher, queue consumers) are
    not requests. A request awaiting a call outside the process (a socket read, an HTTP client
    call, a sleep) waits on no local limit: `underloaded` names that call instead.
    A framework's capacity is one such primitive: FastAPI / Starlette `def` endpoints (and
    `run_in_threadpool`) take one of the tokens of AnyIO's thread limiter (40 by default); when
    every token is held, further requests wait as tasks in `CapacityLimiter.acquire`, before
    any application code runs. The holders are threads, so the finding also says what the
    worker threads (those running the framework's worker loop) do, from the stack samples:
    the innermost application frame, its call, and whether it waits outside the process.

Why it matters:
    A suspended coroutine is on no thread's stack: the event loop idles in its selector while
    every request queues on the primitive, and stack sampling alone reads that as a service
    waiting for work. A semaphore of two permits around a 20 ms backend call caps the process
    at 100 calls a second whatever the concurrency the clients send.

What to do instead:
    If the resource the primitive guards has headroom (an accelerator not yet busy, a remote
    model server that takes more concurrent calls), raise the permits to about the requests
    that reach it. A lock around an awaited call serializes the requests: shorten what runs
    under it. Requests waiting on a queue's consumers or a batcher's result need more
    consumers, bigger batches or shorter batching intervals. Requests queued for worker
    threads whose holders wait on calls outside the process: raise the limiter's tokens to
    about the requests that reach it (`total_tokens = N` on
    `anyio.to_thread.current_default_thread_limiter()`, at startup inside the loop), or make
    the endpoint `async def` with an async client so no thread is held while it waits; holders
    that compute need cores, not tokens. The predicted gain is Little's law on the measured
    waits: at the same concurrency, each request's time shrinks by the share it spent waiting
    there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING


from diagnose.checks import event_loop_blocked
from diagnose.checks.base import (Finding, NotApplicable, ScoreBasis, Site, amdahl, core_room,
                                  make_finding, pct, ramp, short_path)
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, same_as, shared_key
from diagnose.checks.measurements import OMITTED, Measurements, Omitted
from diagnose.report.model.findings import Fix
from diagnose.vocab import AwaitKind, ChainEnd
from diagnose.model.chain_words import chain_line
from diagnose.model.chains import Chain
from diagnose.model.task_chains import all_taken
from diagnose.model.worker_threads import ThreadHolders
from diagnose.report.model import ProcessTasks, TaskAwaitSite
from diagnose.vocab import CallbackKind, ThreadState

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "async_wait"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Requests wait on an asyncio primitive"
    what: str = ("Share of asyncio request tasks' time waiting on an in-process primitive (Semaphore, Lock, "
                 "Condition, Event, Queue get/put, a future another task resolves), read from the tasks in the "
                 "target's memory.")
    advice: tuple[str, ...] = (
        ("The limit is in the process, not in its load: requests are in flight, parked on a primitive while the "
         "event loop idles. More clients or more event-loop CPU will not help."),
        ("If the guarded resource has no headroom, batch the requests behind the primitive (one call for many) or "
         "scale the resource out; measure its own utilization before raising the permits."),
    )
    low: float = 0.1
    high: float = 0.5


@dataclass(frozen=True, kw_only=True)
class AsyncWaitEvidence(Measurements):
    async_wait_share: float = shared_key()
    request_tasks_avg: float = key("request tasks in flight, on average", U.NUMBER)
    task_reads: int = key("reads of the asyncio tasks behind the shares", U.SAMPLES)
    loop_busy_share: float | None = same_as(event_loop_blocked.EVIDENCE["loop_busy_share"])
    # The top await site's, where the requests waited on one:
    top_site_share: float | Omitted = key(
        "share of request-task time waiting at the top await site", U.PERCENT, optional=True)
    primitive: str | Omitted = key("what the requests wait on at the top site", U.TEXT, optional=True)
    primitive_name: str | None | Omitted = key("its name at the await site", U.TEXT, optional=True)
    permits: int | None | Omitted = key("its permits in all (holders + free, read)", U.NUMBER, optional=True)
    permits_free: int | None | Omitted = key("its free permits, fewest read", U.NUMBER, optional=True)
    tasks_waiting_avg: float | Omitted = key(
        "request tasks waiting at the top site, on average", U.NUMBER, optional=True)
    tasks_waiting_max: int | Omitted = key(
        "request tasks waiting at the top site, at most", U.NUMBER, optional=True)
    tasks_holding_avg: float | None | Omitted = key(
        "request tasks inside the block the top site guards, on average", U.NUMBER, optional=True)
    fix: Fix | Omitted = shared_key(optional=True)
    # The worker threads behind it (a capacity's holders, a future's executor), where read:
    holder_threads: int | Omitted = key(
        "worker threads of the capacity's holders (the framework's worker loop)", U.THREADS, optional=True)
    holders_in: str | None | Omitted = key(
        "where the worker threads were, busy, most of the time (innermost application frame and its call)",
        U.TEXT, optional=True)
    holders_in_share: float | None | Omitted = key(
        "share of the worker threads' busy samples there", U.PERCENT, optional=True)
    holders_state: str | None | Omitted = key("what the worker threads did there", U.TEXT, optional=True)


EVIDENCE = declarations(AsyncWaitEvidence)

# What each kind is, in the summary's words.
KIND_WORDS = {
    AwaitKind.SEMAPHORE: "asyncio.Semaphore", AwaitKind.LOCK: "asyncio.Lock",
    AwaitKind.CONDITION: "asyncio.Condition", AwaitKind.EVENT: "asyncio.Event",
    AwaitKind.QUEUE_GET: "asyncio.Queue get", AwaitKind.QUEUE_PUT: "asyncio.Queue put",
    AwaitKind.FUTURE: "a future another task resolves",
    AwaitKind.CAPACITY: "a capacity limiter",
}

# What a worker thread's state says about where it is.
STATE_WORDS = {
    ThreadState.IO: "a call outside the process", ThreadState.LOCK: "waiting on a lock",
    ThreadState.GIL: "waiting for the GIL", ThreadState.PYTHON: "running Python",
    ThreadState.NATIVE: "running native code",
}
OUTSIDE = (ThreadState.IO,)


def holders_words(holders: ThreadHolders, tokens: int | None) -> str:
    """"all 4 are in load_user → sock.recv (a call outside the process)"."""
    if not holders.where:
        return ""
    what = STATE_WORDS.get(holders.state, "") if holders.state is not None else ""
    tail = f" ({what})" if what else ""
    count = tokens if tokens is not None else holders.threads
    if holders.share >= 0.9:
        if count == 1:
            return f"its one holder is in {holders.where}{tail}"
        return f"all {count} are in {holders.where}{tail}"
    return f"they are in {holders.where}{tail} {pct(holders.share)} of their busy time"


def site_words(site: TaskAwaitSite, workers: ThreadHolders | None = None) -> str:
    """The site's primitive as "the ..." completes it. A future that worker threads resolve
    (run_in_executor, asyncio.to_thread) is theirs, not another task's."""
    if site.kind == AwaitKind.CAPACITY and site.detail:
        return f"{site.detail} at {short_path(site.file)}:{site.line} ({site.function})"
    what = KIND_WORDS.get(site.kind, str(site.kind))
    if site.kind == AwaitKind.FUTURE:
        resolvers = "the worker threads" if workers is not None and workers.threads else "another task"
        what = f"futures {resolvers} resolve{'' if workers is not None and workers.threads else 's'}"
    name = f" `{site.name}`" if site.name else ""
    return f"{what}{name} at {short_path(site.file)}:{site.line} ({site.function})"


@dataclass(frozen=True)
class LoopLoad:
    """How much of the window the busiest loop spent serving, which bounds what more it can
    serve. Out of its selector is serving only while it runs or blocks in the app's code: a
    loop waiting for a core or for the GIL is out of its selector too, and its /proc counters
    (CPU time) say so. Where the counters deny the samples, the counters are kept."""

    sampled: float  # of its samples, out of the selector
    serving: float  # what the bound uses: the sampled share, or the counters' where lower
    on_cpu: float | None = None  # its CPU time over the window, from /proc
    blocked_in_app: float = 0.0  # of its samples, in the app's blocking calls


def loop_load(analysis: Analysis) -> LoopLoad | None:
    """The busiest loop's load (LoopLoad), None without a loop."""
    loads = []
    for loop in analysis.event_loops or ():
        blocked = sum(c.share for c in loop.callbacks if c.kind == CallbackKind.BLOCKING_CALL)
        counted = None if loop.cpu_share_os is None else loop.cpu_share_os + blocked
        serving = loop.busy_share if counted is None else min(loop.busy_share, counted)
        loads.append(LoopLoad(loop.busy_share, round(serving, 4), loop.cpu_share_os, round(blocked, 4)))
    return max(loads, key=lambda load: load.serving, default=None)


def little_gain(site_share: float, busy: float | None, room: float | None = None) -> float:
    """Throughput ratio if the wait at a site went away, same concurrency (Little's law:
    throughput = requests in flight / time per request), capped by the loop's own headroom
    (`busy`: its share out of the selector; one loop runs on one core) and by the cores the
    process could use (`room`: base.core_room)."""
    gain = amdahl(site_share)
    if busy:
        gain = min(gain, max(1.0, 1.0 / busy))
    if room is not None:
        gain = min(gain, room)
    return max(1.0, gain)


THREAD_LIMITER_KNOB = "anyio.to_thread.current_default_thread_limiter().total_tokens"


def capacity_advice(site: TaskAwaitSite, holders: ThreadHolders | None, estimate: str, reach: int
                    ) -> tuple[str, Fix | None]:
    """The advice for requests queued on a framework's thread capacity."""
    tokens = f" from {site.capacity}" if site.capacity is not None else ""
    wait = f"{pct(site.share)} of their time for a worker thread"
    if holders is not None and holders.where and holders.state in OUTSIDE:
        return (f"Requests wait {wait}, and the threads wait in {holders.where} (a call outside "
                f"the process): raise the limiter's tokens{tokens} to about {reach} (the requests "
                f"that reach it; `{THREAD_LIMITER_KNOB} = {reach}` at startup, inside the event "
                f"loop, for `def` endpoints and run_in_threadpool; or the limiter passed to "
                f"`to_thread.run_sync`), or make the endpoint `async def` with an async client so "
                f"no thread is held while it waits ({estimate}, if the downstream takes the "
                f"extra concurrent calls).",
                Fix(THREAD_LIMITER_KNOB, reach))
    if holders is not None and holders.where and holders.state is not None:
        return (f"Requests wait {wait}; the threads are {STATE_WORDS.get(holders.state, 'busy')} "
                f"in {holders.where}: more tokens add threads to the same work. Make that work "
                f"cheaper, or scale out; raise the limiter's tokens{tokens} (`{THREAD_LIMITER_KNOB}`"
                f") only while the cores have room ({estimate}).", None)
    return (f"Requests wait {wait}: raise the limiter's tokens{tokens} to about {reach} "
            f"(`{THREAD_LIMITER_KNOB} = {reach}` at startup) if what the threads do has headroom, "
            f"or make the endpoint `async def` with an async client ({estimate}).",
            Fix(THREAD_LIMITER_KNOB, reach))


EXECUTOR_KNOB = "executor_max_workers"


def full_executor(site: TaskAwaitSite, holders: ThreadHolders | None) -> bool:
    """Requests await futures whose executor's threads are all taken."""
    return site.kind == AwaitKind.FUTURE and holders is not None and all_taken(holders)


def executor_workers(site: TaskAwaitSite, holders: ThreadHolders) -> int:
    """The workers the advice gives the executor: the requests that reach it, more than today."""
    return max(math.ceil(site.waiting_avg + (site.holders_avg or 0.0)), holders.threads + 1)


def executor_advice(site: TaskAwaitSite, holders: ThreadHolders, estimate: str, reach: int,
                    chain: Chain | None = None) -> tuple[str, Fix | None]:
    """The advice for requests awaiting futures an executor's threads resolve, every thread
    taken (run_in_executor, asyncio.to_thread, a ThreadPoolExecutor): the executor is the
    limit, not the code that awaits it."""
    said = holders_words(holders, None)
    busy = f"{holders.busy_avg:.1f} of its {holders.threads} threads busy on average"
    wanted = executor_workers(site, holders)
    if chain is not None and chain.end != ChainEnd.WORKER_THREADS and len(chain.hops) > 1:
        # the workers' own wait ends at a limit of its own (a server at capacity, a lock's
        # holder): more workers would queue there
        return (f"Requests wait {pct(site.share)} of their time for futures an executor's threads "
                f"resolve ({busy}), and the threads wait in turn: {chain_line(chain)}. More workers "
                f"would queue at that end: act there ({estimate} if it were gone).", None)
    if holders.state in OUTSIDE:
        return (f"Requests wait {pct(site.share)} of their time for futures an executor's threads "
                f"resolve ({busy}; {said}): the executor is the limit. Give it about {wanted} "
                f"workers (`loop.set_default_executor(ThreadPoolExecutor(max_workers={wanted}))` "
                f"for run_in_executor(None, ...) and asyncio.to_thread, or the max_workers of the "
                f"executor passed to run_in_executor), or make the call async so no thread is held "
                f"while it waits ({estimate}, if what it calls takes the extra concurrent calls).",
                Fix(EXECUTOR_KNOB, wanted))
    return (f"Requests wait {pct(site.share)} of their time for futures an executor's threads "
            f"resolve ({busy}; {said}): more workers add threads to the same work. Make that work "
            f"cheaper, or run it in processes; raise max_workers only while the cores have room "
            f"({estimate}).", None)


def first_advice(site: TaskAwaitSite, summary: ProcessTasks, gain: float,
                 holders: ThreadHolders | None = None, chain: Chain | None = None) -> tuple[str, Fix | None]:
    """The advice for the top site, with the knob and value it proposes (or None)."""
    where = site_words(site, holders)
    name = f"`{site.name}`" if site.name else "it"
    estimate = (f"estimated {gain:.1f}x from Little's law on {summary.snapshots} reads of the "
                f"tasks")
    reach = max(1, math.ceil(site.waiting_avg + (site.holders_avg or 0.0)))
    if site.kind == AwaitKind.CAPACITY:
        return capacity_advice(site, holders, estimate, reach)
    if site.kind == AwaitKind.SEMAPHORE:
        permits = f" from {site.capacity}" if site.capacity is not None else ""
        return (f"Requests wait {pct(site.share)} of their time on the {where}: raise its "
                f"permits{permits} to about {reach} (the requests that reach it) if the resource "
                f"it guards has headroom ({estimate}); if it has none, batch the requests behind "
                f"{name} or scale the resource out.",
                Fix(site.name or "permits", reach))
    if site.kind in (AwaitKind.LOCK, AwaitKind.CONDITION):
        return (f"Requests wait {pct(site.share)} of their time on the {where}: it serializes "
                f"them. Move the awaited call out of the block it guards, or use a semaphore of "
                f"about {reach} permits if the guarded resource takes concurrent calls "
                f"({estimate}); else batch behind it or scale out.", None)
    if site.kind == AwaitKind.QUEUE_PUT:
        return (f"Requests wait {pct(site.share)} of their time to put on the {where}: its "
                f"consumers are the limit. Add consumers, or have each consume a batch "
                f"({estimate}).", None)
    if site.kind == AwaitKind.QUEUE_GET:
        return (f"Requests wait {pct(site.share)} of their time to get from the {where} (a pool "
                f"of items): add items to the pool if what they stand for has headroom "
                f"({estimate}).", None)
    if full_executor(site, holders):
        assert holders is not None
        return executor_advice(site, holders, estimate, reach, chain)
    if site.kind == AwaitKind.FUTURE:
        return (f"Requests wait {pct(site.share)} of their time for {where}: the task that "
                f"resolves it (a batcher, a consumer) is the limit. Run bigger batches or "
                f"shorter intervals, or more of those tasks ({estimate}).", None)
    return (f"Requests wait {pct(site.share)} of their time on the {where}: find what sets it and "
            f"why it is late ({estimate}).", None)


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    """The request tasks' waits on in-process primitives, led by the top site (_top_wait): its
    words and evidence (_top_words), the gain's basis (_gain_basis) and the sites (_sites)."""
    recording = analysis.tasks
    assert recording is not None  # needs ASYNC_TASKS: the engine runs this check only with them
    if recording.unreadable:
        return NotApplicable(ID, recording.unreadable)
    summary: ProcessTasks | None = analysis.await_sites
    if summary is None:
        return NotApplicable(ID, f"no read of the asyncio tasks succeeded ({recording.reads} tried)")
    if summary.request_tasks_avg <= 0:
        return NotApplicable(ID, f"no request task was seen in {summary.snapshots} reads of the "
                                 f"asyncio tasks")
    share = summary.local_share
    local = summary.local_sites
    # The shares are of request-task observations (a task in one read), as a thread's shares are
    # of its samples; the tasks of one read are correlated as a thread's consecutive samples
    # are, so the interval is a lower bound on the uncertainty (model/confidence.py).
    observations = int(round(summary.request_tasks_avg * summary.snapshots))
    load = loop_load(analysis)
    busy = load.serving if load is not None else None
    room = core_room(analysis)
    evidence = AsyncWaitEvidence(async_wait_share=share, request_tasks_avg=summary.request_tasks_avg,
                                 task_reads=summary.snapshots,
                                 loop_busy_share=load.sampled if load is not None else None)
    if not local:
        summary_text = (f"request tasks waited on no in-process asyncio primitive "
                        f"({summary.snapshots} reads, {summary.request_tasks_avg:.1f} in flight "
                        f"on average)")
        return make_finding(ID, settings, 0.0, summary_text, evidence, samples=observations,
                            basis=ScoreBasis("async_wait_share",
                                             lambda s: ramp(s, settings.low, settings.high)))
    top = _top_wait(analysis, local[0], busy, room)
    advice, fix = first_advice(top.site, summary, top.gain, top.holders, top.chain)
    text, evidence = _top_words(top, share, evidence, fix)
    basis = _gain_basis(summary, top, load, room)
    # The gain follows the share the score rests on, in proportion (the top site's part of it).
    part = top.site.share / share if share else 1.0
    executor_bound = top.executor_bound
    return make_finding(ID, settings, ramp(share, settings.low, settings.high), text, evidence,
                        _sites(local, top), advice=[advice, *settings.advice], gain=(top.gain, basis),
                        samples=observations,
                        basis=ScoreBasis("async_wait_share",
                                         lambda s: ramp(s, settings.low, settings.high),
                                         lambda s: min(little_gain(s * part, busy, room),
                                                       executor_bound or float("inf"))))


@dataclass(frozen=True)
class _TopWait:
    """The top await site, the worker threads behind it (a capacity's holders, a future's
    executor), and the gain of its waits gone."""

    site: TaskAwaitSite
    holders: ThreadHolders | None
    # An executor whose threads all wait outside serves, with more workers, at most that many
    # more at once: its size bounds the gain as much as the waits do.
    executor_bound: float | None
    gain: float
    # the request tasks' chain through those threads to where their wait ends (model/task_chains.py)
    chain: Chain | None = None


def _top_wait(analysis: Analysis, top: TaskAwaitSite, busy: float | None, room: float | None) -> _TopWait:
    """The top site's gain (little_gain), bounded by its executor's size where that is full."""
    gain = little_gain(top.share, busy, room)
    holders = analysis.worker_threads if top.kind in (AwaitKind.CAPACITY, AwaitKind.FUTURE) else None
    # the chain through the workers, where it starts at this site (the top local site)
    chain = next(iter(analysis.task_chains), None) if holders is not None else None
    # more workers serve more at once only where the chain ends at them: a limit past them
    # (a server at capacity, a lock's holder) is where the time goes
    ends_at_workers = chain is None or chain.end == ChainEnd.WORKER_THREADS
    executor_bound = (executor_workers(top, holders) / holders.threads
                      if holders is not None and full_executor(top, holders) and holders.state in OUTSIDE
                      and ends_at_workers else None)
    if executor_bound is not None:
        gain = min(gain, executor_bound)
    return _TopWait(top, holders, executor_bound, gain, chain)


def _top_words(top_wait: _TopWait, share: float, evidence: AsyncWaitEvidence,
               fix: Fix | None) -> tuple[str, AsyncWaitEvidence]:
    """The summary of the top site (a capacity's queue, else the primitives' share), with its
    evidence and the worker threads' where they were read."""
    top, holders = top_wait.site, top_wait.holders
    evidence = replace(evidence, top_site_share=top.share, primitive=KIND_WORDS.get(top.kind, str(top.kind)),
                       primitive_name=top.name or None, permits=top.capacity, permits_free=top.permits_free,
                       tasks_waiting_avg=round(top.waiting_avg, 2), tasks_waiting_max=top.waiting_max,
                       tasks_holding_avg=None if top.holders_avg is None else round(top.holders_avg, 2),
                       fix=fix if fix is not None else OMITTED)
    if top.kind == AwaitKind.CAPACITY:
        tokens = f"one of {top.capacity}" if top.capacity is not None else "one of the"
        text = (f"on average {top.waiting_avg:.0f} requests wait for {tokens} worker threads "
                f"(at most {top.waiting_max}; the {site_words(top)}, {pct(top.share)} of "
                f"request-task time)")
        if holders is not None:
            said = holders_words(holders, top.capacity)
            if said:
                text += f"; {said}"
            evidence = _with_holders(holders, evidence)
        return text, evidence
    text = (f"{pct(share)} of request-task time waits on in-process asyncio primitives, most "
            f"on the {site_words(top, holders)}: {top.waiting_avg:.1f} tasks waiting on average, "
            f"{top.waiting_max} at most")
    if top.capacity is not None:
        text += f", {top.capacity} permits"
    if top.kind == AwaitKind.FUTURE and holders is not None and holders.threads:
        said = holders_words(holders, None)
        text += (f"; the executor's {holders.threads} threads were busy {holders.busy_avg:.1f} on "
                 f"average" + (f", {said}" if said else ""))
        evidence = _with_holders(holders, evidence)
    return text, evidence


def _with_holders(holders: ThreadHolders, evidence: AsyncWaitEvidence) -> AsyncWaitEvidence:
    """The evidence with the worker threads' (where they were, busy, and doing what)."""
    return replace(evidence, holder_threads=holders.threads, holders_in=holders.where or None,
                   holders_in_share=holders.share if holders.where else None,
                   holders_state=STATE_WORDS.get(holders.state) if holders.state is not None else None)


def _gain_basis(summary: ProcessTasks, top_wait: _TopWait, load: LoopLoad | None, room: float | None) -> str:
    """How the gain was reached: Little's law on the top site's share, then each bound."""
    top, holders, executor_bound = top_wait.site, top_wait.holders, top_wait.executor_bound
    basis = (f"estimate from {summary.snapshots} reads of the asyncio tasks (Little's law): "
             f"requests spent {pct(top.share)} of their time waiting at "
             f"{short_path(top.file)}:{top.line} ({summary.request_tasks_avg:.1f} in flight on "
             f"average); at the same concurrency each request's time shrinks by that share, so "
             f"throughput rises up to {amdahl(top.share):.2f}x if the guarded resource keeps its "
             f"time per call")
    if load is not None and load.serving:
        basis += f"; the event loop was out of its selector {pct(load.sampled)} of its samples"
        if load.serving < load.sampled and load.on_cpu is not None:
            # the rest waited for a core or the GIL: time a loop with a core of its own serves
            basis += (f", but its /proc counters show it on a CPU {pct(load.on_cpu)} of the window "
                      f"and its samples in blocking calls {pct(load.blocked_in_app)}: it served "
                      f"{pct(load.serving)} of the time (the counters kept)")
        basis += f", so it can serve at most {1.0 / load.serving:.2f}x more"
    if room is not None:
        basis += f"; the cores the process could use allow {room:.2f}x"
    if executor_bound is not None and holders is not None:
        basis += (f"; the executor's {holders.threads} threads all wait in a call outside the process, "
                  f"so {executor_workers(top, holders)} workers serve at most {executor_bound:.2f}x as "
                  f"many at once")
    return basis


def _sites(local: tuple[TaskAwaitSite, ...], top_wait: _TopWait) -> list[Site]:
    """The top await sites, and second where a capacity's holders block: the line to change (an
    async client there)."""
    holders = top_wait.holders
    sites = [Site(s.function, s.file, s.line, round(s.share, 4)) for s in local[:5]]
    if holders is not None and holders.site is not None:
        sites.insert(1, Site(holders.site.function, holders.site.file, holders.site.line,
                             round(top_wait.site.share, 4)))
    return sites


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "",
                 run=run, needs=(Input.ASYNC_TASKS,), uses=(Input.EVENT_LOOPS,))
