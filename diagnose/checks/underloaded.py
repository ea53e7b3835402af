"""underloaded: the workers mostly wait for requests, or inside a request for calls outside the
process (a remote store, a downstream service); nothing inside the process limits throughput.

What it finds:
    The share of worker-thread samples idle waiting for work or, inside a request, waiting on a
    call outside the process (IO, sleep), discounted when the cores are busy. A
    thread-per-connection server's handler threads are request workers even when, at light
    load, they spend the request in such a call (an IO or sleep wait, not a lock, queue or GIL
    wait): the stdlib and WSGI servers' request-handling frames name them, whatever the
    application's code. A pipeline is underloaded only when every stage waits for input.
    Where the asyncio tasks were read (`attach`), requests parked on an in-process primitive
    are the service waiting on itself (`async_wait`): that share of request-task time is taken
    off the score; requests awaiting a call outside the process (a socket read, an HTTP client
    call, a sleep) are named by their await site instead of "waiting for work".

Why it matters:
    The service is not the bottleneck at this load: its workers wait for requests. Tuning the
    process will not raise throughput.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.checks.base import (Finding, NotApplicable, ScoreBasis, Site, make_finding, pct, ramp,
                                  short_path, top_sites)
from diagnose.vocab import HANDLER_ROLES, Severity, StageRole, ThreadRole, ThreadState, severity_rank

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "underloaded"
SATURATED = 0.6  # a backend at this share of its capacity or more is a limit, not a wait outside
MOST_SEVERE = Severity.INFO  # whatever the score: nothing inside the process to fix


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The service waits for work, not on itself"
    what: str = ("Share of worker-thread samples idle waiting for work or, inside a request, waiting on a call "
                 "outside the process (IO, sleep), and the CPU utilization of usable cores.")
    advice: tuple[str, ...] = (
        ("The service is not the bottleneck at this load: its workers wait for requests. Look upstream: the load "
         "balancer, the client's concurrency, network, or a gateway."),
        ("If latency is still high, profile at the moment it is high (a load test stepping concurrency up), or "
         "measure the time requests spend before they reach this process."),
        ("Where request threads wait on calls outside the process (a remote store, a downstream service), those "
         "calls set each request's latency: more concurrent requests raise throughput until the downstream's own "
         "capacity."),
    )
    low: float = 0.5
    high: float = 0.9


@dataclass(frozen=True, kw_only=True)
class UnderloadedEvidence(Measurements):
    waiting_share_of_workers: float = key(
        "share of worker time waiting for work or on calls outside the process", U.PERCENT)
    idle_share_of_workers: float = key("share of worker time idle, waiting for work", U.PERCENT)
    waiting_outside_share_of_workers: float = key(
        "share of worker time inside requests waiting on calls outside the process (IO, sleep)", U.PERCENT)
    worker_threads: int = key("worker threads", U.THREADS)
    idle_threads: int = key("threads that only waited for work", U.THREADS)
    cpu_utilization: float | None = key("CPU used, share of usable cores (OS)", U.PERCENT, none=NOT_MEASURED)
    saturated_backend_share: float = key(
        "share of worker time waiting on a local backend at capacity", U.PERCENT)
    # The requests' tasks, where they were read in flight.
    async_wait_share: float | Omitted = shared_key(optional=True)
    downstream_await_share: float | Omitted = key(
        "share of request-task time awaiting calls outside the process", U.PERCENT, optional=True)
    downstream_await: str | Omitted = key(
        "await site of the call outside the process requests wait on most", U.TEXT, optional=True)


EVIDENCE = declarations(UnderloadedEvidence)

def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    """Workers waiting for work or outside the process, less what busy cores, own waits or full backends explain."""
    roles = analysis.threads["role"]
    handlers = analysis.handler_threads
    # a thread polling for its result (model/poll_loops.py) is inside a request, however little
    # of the window it was busy
    workers = analysis.threads[roles.isin(HANDLER_ROLES)
                               | analysis.threads.index.isin(list(handlers | analysis.poll_loops.polling))]
    if workers.empty:
        return NotApplicable(ID, "no worker threads were seen")
    samples = analysis.samples[analysis.samples["thread"].isin(workers.index)]
    total = float(samples["count"].sum())
    idle = (samples["state"] == ThreadState.IDLE).to_numpy()
    # A handler thread in an IO or sleep wait inside a request waits for something outside the
    # process (locks, queues and the GIL are the process's own and scored by their checks).
    # A poll loop's sleep (model/poll_loops.py) is the process's own wait, not a call outside it.
    outside = ((samples["state"] == ThreadState.IO) & samples["thread"].isin(list(handlers))
               & ~samples["site"].isin(analysis.poll_loops.frames)).to_numpy()
    counts = samples["count"].to_numpy()
    idle_share = float(counts[idle].sum()) / total if total else 0.0
    outside_share = float(counts[outside].sum()) / total if total else 0.0
    share = idle_share + outside_share
    structure = analysis.structure
    stages = [st for st in structure.stages if st.role == StageRole.STAGE]
    if structure.pipeline and stages:
        # A pipeline is underloaded only when every stage waits for input: a stage blocked on
        # put, or busy, is waiting for (or is) the bottleneck, not for requests.
        # Stages starved because the requests that feed them sleep polling for results
        # (model/poll_loops.py) wait on those requests' own sleep, not for work.
        share = min(st.starved_share for st in stages) * (1.0 - analysis.poll_loops.share)
    utilization = analysis.os.cpu_utilization if analysis.os is not None else None
    # Busy cores contradict "waiting for work", whatever the thread states say.
    cores_factor = max(0.0, 1.0 - max(0.0, utilization - 0.5) / 0.4) if utilization is not None else 1.0
    tasks = analysis.await_sites
    in_flight = tasks is not None and tasks.request_tasks_avg > 0
    # Requests parked on the process's own primitives, or polling for a result it produces
    # (model/async_polls.py): the service waits on itself.
    polls = analysis.async_polls
    local_factor = 1.0 - min(1.0, tasks.local_share + polls.share) if tasks is not None and in_flight else 1.0
    # Requests in flight at a local backend at its capacity wait on it, not for work: its share
    # of the workers' time is taken off (backend_saturated speaks of it).
    saturated = _saturated_backend_share(analysis, [int(t) for t in workers["tid"]])
    score = ramp(share, settings.low, settings.high) * cores_factor * local_factor * (1.0 - saturated)
    evidence = UnderloadedEvidence(waiting_share_of_workers=share, idle_share_of_workers=idle_share,
                                   waiting_outside_share_of_workers=outside_share, worker_threads=int(len(workers)),
                                   idle_threads=int((workers["role"] == ThreadRole.IDLE).sum()),
                                   cpu_utilization=utilization, saturated_backend_share=saturated)
    sites = top_sites(analysis, samples[idle | outside], total, limit=3)
    summary = f"worker threads were idle waiting for work {pct(idle_share)} of the time"
    if outside_share:
        summary = (f"worker threads waited {pct(share)} of the time: for work {pct(idle_share)}, "
                   f"on calls outside the process (IO, sleep) {pct(outside_share)}")
    if tasks is not None and in_flight:
        # a poll's sleep is no call outside the process (poll_loop speaks of it)
        downstream = [s for s in tasks.downstream_sites if (s.file, s.line) not in polls.sites]
        downstream_share = tasks.downstream_share - sum(s.share for s in tasks.downstream_sites
                                                        if (s.file, s.line) in polls.sites)
        evidence = replace(evidence, async_wait_share=tasks.local_share,
                           downstream_await_share=max(0.0, downstream_share))
        if downstream:
            top = downstream[0]
            name = f" `{top.name}`" if top.name else ""
            evidence = replace(evidence, downstream_await=(f"{top.function} ({short_path(top.file)}:{top.line})"
                                                           f"{name}, {top.kind}"))
            summary = (f"requests waited {pct(downstream_share)} of their time on calls "
                       f"outside the process, most at {top.function} "
                       f"({short_path(top.file)}:{top.line}){name}; worker threads were idle "
                       f"{pct(idle_share)} of the time")
            sites = [Site(s.function, s.file, s.line, round(s.share, 4)) for s in downstream[:3]]
        if tasks.local_share:
            summary += (f"; requests also waited {pct(tasks.local_share)} of their time on the "
                        f"process's own asyncio primitives")
    if utilization is not None:
        summary += f"; cores {pct(min(utilization, 1.0))} busy"
    found = make_finding(ID, settings, score, summary, evidence, sites,
                         gain=(1.0, "estimate: nothing inside the process limits throughput"),
                         samples=total,
                         basis=ScoreBasis("waiting_share_of_workers",
                                          lambda s: ramp(s, settings.low, settings.high)
                                          * cores_factor * local_factor * (1.0 - saturated)))
    # The score says how sure it is that the process waits for work, not how bad that is: an
    # idle service is no fault of its own, and a gate (--fail-on warning) must not fail it.
    return replace(found, severity=MOST_SEVERE) if severity_rank(found.severity) > severity_rank(MOST_SEVERE) else found


def _saturated_backend_share(analysis: Analysis, tids: list[int]) -> float:
    """Of the workers' time, the share spent waiting on local backends that ran at capacity
    (the chains whose first hop is a socket a local process serves, model/chains.py, at
    saturation SATURATED or more)."""
    if not tids:
        return 0.0
    # most waited first among these threads, as the sum was always taken
    backends = sorted((c.among(tids) for c in analysis.chains if c.at_local_backend), key=lambda c: -c.seconds)
    waited = sum(c.occupancy for c in backends if c.waiters and c.first.saturation >= SATURATED)
    return min(1.0, waited / len(tids))


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(), uses=(Input.OS_COUNTERS, Input.PIPELINE))
