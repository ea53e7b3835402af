"""pool_wait: request threads block acquiring a resource from a bounded pool.

What it finds:
    The share of request-thread time blocked in queue.get / Semaphore.acquire deep inside
    request handling: a connection, client or model-instance pool another request holds (the
    kinds: vocab.POOL_KINDS). A worker's own loop waiting on its work queue is idle, not this.
    The most threads seen holding the resource at once bounds the pool size from below.

Why it matters:
    The pool is smaller than the concurrency that needs it: every request waits for a
    connection or instance before it can work. This is not the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.base import Finding, pct
from diagnose.checks.wait_share import WaitShare, line_of, wait_finding, where
from diagnose.vocab import POOL_KINDS, ChainEnd, ResourceKind
from diagnose.model.chain_words import chain_line
from diagnose.model.chains import Chain
from diagnose.model.condition_waits import condition_key
from diagnose.report.model.sections import WaitSite
from diagnose.model.waits import describe
from diagnose.report.model.findings import Fix

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "pool_wait"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Request threads wait for a pooled resource"
    what: str = ("Share of request-thread time blocked in queue.get / Semaphore.acquire deep inside request "
                 "handling (a connection, client or model-instance pool).")
    advice: tuple[str, ...] = (
        ("The pool is smaller than the concurrency that needs it: every request waits for a connection/instance "
         "before it can work. This is not the model."),
        ("Size the pool to the request threads that use it at once (or cap the request threads to the pool size), "
         "and hold a pooled resource only for the call that needs it."),
        ("Add a timeout to the acquire and fail fast when the pool is exhausted, so overload becomes a quick error "
         "instead of a queue."),
    )
    low: float = 0.05
    high: float = 0.5


@dataclass(frozen=True, kw_only=True)
class PoolWaitEvidence(Measurements):
    pool_wait_share: float = key("share of request-thread time waiting for a pooled resource",
                                 U.PERCENT, estimable=True)
    pool_wait_thread_seconds: float = key("time waiting for the pool, summed over threads",
                                          U.SECONDS, estimable=True)
    request_threads: int = shared_key()
    # The top site's, where there is one.
    acquire_site: str | Omitted = key("where the resource is acquired", U.TEXT, optional=True)
    kind: str | Omitted = key("kind of pool", U.TEXT, optional=True)
    threads_waiting: int | Omitted = shared_key(optional=True)
    max_concurrent_waiters: int | Omitted = shared_key(optional=True)
    # The most threads seen holding the resource at once bounds the pool size from below.
    pool_size_estimate: int | None | Omitted = key("pool size, at least (most seen held at once)", U.NUMBER,
                                                   none="unknown", optional=True)
    holder: str | Omitted = shared_key(optional=True)
    fix: Fix | Omitted = shared_key(optional=True)


EVIDENCE = declarations(PoolWaitEvidence)


def run(analysis: Analysis, settings: Settings) -> Finding:
    measured = WaitShare.of(analysis, POOL_KINDS)
    share, top = measured.share, measured.top
    evidence = PoolWaitEvidence(pool_wait_share=share, pool_wait_thread_seconds=measured.thread_seconds,
                                request_threads=int(len(analysis.request_threads)))
    summary = f"{pct(share)} of request-thread time waits for a pooled resource"
    advice = None
    if top is not None:
        chain = pool_chain(analysis, top)
        if chain is not None and chain.end != ChainEnd.POOL_ITEMS:
            # the holders' own wait ends at a limit past the pool (a server at capacity, a
            # lock's holder): a bigger pool queues there instead
            advice = [f"The threads holding the pool's items wait in turn: {chain_line(chain)}. A bigger "
                      f"pool would queue at that end: act there first.", *settings.advice[2:]]
        evidence = replace(
            evidence, acquire_site=line_of(top), kind=top.label, threads_waiting=top.threads,
            max_concurrent_waiters=top.max_concurrent, pool_size_estimate=top.max_holders or None,
            holder=describe(top),
            fix=Fix("pool_size", max(top.max_concurrent + (top.max_holders or 0), (top.max_holders or 0) + 1)))
        size = f"; about {top.max_holders} held at once (the pool size?)" if top.max_holders else ""
        summary = (f"{pct(share)} of request-thread time waits for a pooled resource at "
                   f"{where(top, top.label)}{size}")
    return wait_finding(ID, settings, analysis, measured, "pool_wait_share", summary, evidence, "waiting for the pool",
                        advice=advice)


def pool_chain(analysis: Analysis, site: WaitSite) -> Chain | None:
    """The chain of waits through the pool the request threads queue on at `site`
    (model/condition_waits.py names it by its line); None where the kernel's record has none."""
    key = condition_key(site.file, site.line)
    return next((c for c in analysis.chains if c.first.resource == ResourceKind.POOL and c.first.key == key), None)


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.REQUEST_SAMPLES,), uses=(Input.OS_COUNTERS,),
                 floor_without=(Input.OS_COUNTERS,))
