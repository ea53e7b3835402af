"""pool_transfer: a process pool's transfers cost more than its tasks.

What it finds:
    Requests that wait on a process pool (a `ProcessPoolExecutor`, a `multiprocessing.Pool`, a
    DataLoader: model/process_pipeline.py) while the pool's CPU goes to moving the tasks rather
    than running them (model/pool_transfer.py): the parent's transport threads (the queue feeder
    that pickles each task's arguments and writes them into a pipe, the handler that takes the
    results back), and the workers' time reading and unpickling what they were sent, against
    the time their samples show in the task. From the OS counters (the threads' and processes'
    CPU, the bytes the workers' read calls took in) and the workers' busy samples.

Why it matters:
    Every task's arguments are pickled in the parent, copied through a pipe and unpickled in a
    worker, on one feeder thread for the whole pool and one call queue whose lock the workers
    take in turn. A large argument (an image, an array, a list of records) costs the kernel a
    fresh page for every 4 KB of each copy; a small task costs the same fixed round trip
    whatever it does. When that is most of the pool's time, more workers or a faster task buy
    nothing: the transport is the work. An 8 MB array sent to a pool of two for a task of
    microseconds served 40 requests a second; the 128 KB the task read, 950; the task in the
    request thread, 1,500-1,800 (fixtures/servers/pool_transfer.py).

What to do instead:
    Send the pool less with each task: what the task reads (a slice, a thumbnail), a key or a
    path the worker loads itself, or the array in shared memory
    (`multiprocessing.shared_memory`, a numpy array over its buffer); when many small tasks cost
    more than their work, send fewer, larger ones (`chunksize=`, a batch per task). Where the
    task costs less than its transfer, run it in the request thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from diagnose.checks.base import (Finding, Lever, LeverKind, ScoreBasis, Site, amdahl, make_finding, pct,
                                  ramp, short_path)
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements
from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.model.pool_transfer import PoolTransfer
from diagnose.report.model.findings import Fix

ID = "pool_transfer"

# The most of the requests' time a gain is predicted on: the transport's share of the pool's CPU
# comes from counters and the requests' wait from their own samples, so a share near 1 is
# measured, not noise; still, above this it says "nearly all", not a figure (10x). The fixture's
# measured fixes bought 23x and 40x where this predicted 10x.
MAX_TRANSFER_SHARE = 0.9
LARGE_READ_BYTES = 16 * 1024  # per read call: tasks that arrive in large blocks carry large arguments


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "A process pool's transfers cost more than its tasks"
    what: str = ("Share of a process pool's CPU spent moving tasks (the parent's feeder and result threads, the "
                 "workers reading and unpickling) rather than running them, while requests wait on the pool.")
    advice: tuple[str, ...] = (
        ("More worker processes do not help: every task passes through the parent's one feeder thread and the "
         "one call queue, whose lock the workers take in turn. Re-measure after the change."),
    )
    # the transport's share of the pool's CPU
    low: float = 0.5
    high: float = 0.8
    # the share of the requests' time spent waiting on the pool
    waiting_low: float = 0.3
    waiting_high: float = 0.7


@dataclass(frozen=True, kw_only=True)
class PoolTransferEvidence(Measurements):
    pool: str = key("the process pool (its library)", U.TEXT)
    transport_share: float = key("share of the pool's CPU that moved tasks and results (pickling, pipes, "
                                 "unpickling)", U.PERCENT)
    transport_cpu_s: float = key("CPU spent moving tasks and results", U.SECONDS)
    pool_cpu_s: float = key("the pool's CPU: the parent's transport threads and the worker processes (/proc)",
                            U.SECONDS)
    parent_transport_cpu_s: float = key("the parent's transport threads' CPU (queue feeder, result handler; "
                                        "/proc)", U.SECONDS)
    worker_transport_share: float | None = key("share of the workers' busy samples inside the transport, no "
                                               "task frame running", U.PERCENT, none=NOT_MEASURED)
    waiting_on_pool_share: float = key("share of the requests' time spent waiting on the pool's results",
                                       U.PERCENT)
    worker_read_mb_per_s: float | None = key("bytes the workers' read calls took in (/proc/PID/io rchar)",
                                             U.MB_PER_S, none=NOT_MEASURED)
    bytes_per_read: float | None = key("bytes per read call of the workers (rchar / syscr)", U.NUMBER,
                                       none=NOT_MEASURED)
    fix: Fix = shared_key()


EVIDENCE = declarations(PoolTransferEvidence)


def _score(transport: float, waiting: float, settings: Settings) -> float:
    return ramp(transport, settings.low, settings.high) * ramp(waiting, settings.waiting_low,
                                                               settings.waiting_high) / 100


def _gain(transport: float, waiting: float) -> float:
    """The requests' time if the transport cost nothing: Amdahl on the transport's part of their
    wait, capped at MAX_TRANSFER_SHARE."""
    return amdahl(min(transport * waiting, MAX_TRANSFER_SHARE))


def _where(site: Site | None) -> str:
    return f" at {site.function} ({short_path(site.file)}:{site.line})" if site is not None else ""


def _inline(transfer: PoolTransfer) -> str:
    """Where the task runs without the pool: the request's thread, or for asyncio request tasks
    a thread of the loop's (the loop itself would queue every request behind it)."""
    if transfer.pipeline.consumer_tasks:
        return ("run the task in the request (`await asyncio.to_thread(...)`; on the event loop itself only "
                "where it takes microseconds) where it costs less than its transfer")
    return "run the task in the request thread where it costs less than its transfer"


def _first_advice(transfer: PoolTransfer, at: str) -> str:
    per_read = transfer.bytes_per_read
    measured = (f"the pool's transport took {pct(transfer.transport_share)} of its CPU "
                f"({transfer.transport_cpu_s:.2f} of {transfer.pool_cpu_s:.2f} s)")
    if transfer.read_bytes_per_s is not None and per_read is not None:
        size = f"{per_read / 1024:,.0f} KB" if per_read >= 1024 else f"{per_read:,.0f} bytes"
        measured += f"; its workers read {transfer.read_bytes_per_s / 1e6:,.1f} MB a second, {size} a call"
    if per_read is not None and per_read < LARGE_READ_BYTES:
        return (f"Send the pool fewer, larger tasks{at}: {measured}. Each task costs a round trip of "
                f"pickles, pipe writes and a lock whatever it does: batch the items (`chunksize=` for map, a "
                f"list per submitted task), or {_inline(transfer)}.")
    return (f"Send the pool less with each task{at}: {measured}. Pass what the task reads (a slice or a "
            f"thumbnail, not the whole array), a key or path the worker loads itself, or the array in "
            f"shared memory (`multiprocessing.shared_memory`, a numpy array over its buffer); or "
            f"{_inline(transfer)}.")


def pool_transfer(transfer: PoolTransfer | None, settings: Settings) -> Finding | None:
    """The pool's transport against its work, while requests wait on it; None without a pool."""
    if transfer is None or transfer.pool_cpu_s <= 0:
        return None
    pipeline = transfer.pipeline
    share, waiting = transfer.transport_share, pipeline.consumer_starved
    score = _score(share, waiting, settings)
    gain = _gain(share, waiting)
    site = pipeline.consumer_site
    at = _where(site)
    task = pipeline.entry.function if pipeline.entry is not None else "the task"
    worker_share = transfer.worker_transport_share
    summary = (f"the requests waited on a {pipeline.framework.value} {pct(waiting)} of their time{at}, and "
               f"{pct(share)} of the pool's CPU moved the tasks rather than ran them ({transfer.transport_cpu_s:.2f} "
               f"of {transfer.pool_cpu_s:.2f} s: the parent's transport threads "
               f"{transfer.parent_transport_cpu_s:.2f} s" + (f"; the workers' busy samples {pct(worker_share)} in "
                                                             f"the transport, not {task}"
                                                             if worker_share is not None else "") + ")")
    inputs = (f"the requests waited on the pool {pct(waiting)} of their time and the transport was "
              f"{pct(share)} of the pool's CPU")
    capped = share * waiting > MAX_TRANSFER_SHARE
    gain_words = (f"estimate: {inputs}; if it cost nothing, at most {gain:.2f}x (Amdahl"
                  + (f", capped at {pct(MAX_TRANSFER_SHARE)}" if capped else "") + ")")
    read_per_s = transfer.read_bytes_per_s
    evidence = PoolTransferEvidence(
        pool=pipeline.framework.value, transport_share=share, transport_cpu_s=transfer.transport_cpu_s,
        pool_cpu_s=transfer.pool_cpu_s, parent_transport_cpu_s=transfer.parent_transport_cpu_s,
        worker_transport_share=worker_share, waiting_on_pool_share=waiting,
        worker_read_mb_per_s=read_per_s / 1e6 if read_per_s is not None else None,
        bytes_per_read=transfer.bytes_per_read,
        fix=Fix("pool_transfer", f"{site.function}:{site.line}" if site is not None else True))
    levers = [Lever(LeverKind.REMOVE_WORK, gain, "if the transfers cost nothing",
                    f"estimate: {inputs}; Amdahl" + (f" on a share capped at {pct(MAX_TRANSFER_SHARE)}" if capped
                                                     else ", an upper bound"), upper_bound=not capped)]
    sites = [s for s in (site, pipeline.entry) if s is not None]
    return make_finding(ID, settings, score, summary, evidence, sites,
                        advice=[_first_advice(transfer, at), *settings.advice], gain=(gain, gain_words),
                        levers=levers,
                        share_samples=({"waiting_on_pool_share": pipeline.consumer_samples}
                                       if pipeline.consumer_samples else None),
                        basis=(ScoreBasis("waiting_on_pool_share", lambda w: _score(share, w, settings),
                                          lambda w: _gain(share, w))
                               if pipeline.consumer_samples else None))


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=None,
                 needs=(Input.PIPELINE, Input.OS_COUNTERS), uses=(Input.PROCESS_TREE,), scope="service")
