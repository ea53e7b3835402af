"""worker_imbalance: worker processes are unevenly loaded, or too few for the cores.

What it finds:
    The CPU of each worker process over the window: how unevenly the work spreads (coefficient
    of variation), and how many usable cores stay idle while the busy workers are saturated.
    Only peers compare: the workers of one fleet, siblings running one program of which one at
    least serves requests (a pre-fork server's workers, a pool's processes), never a server and
    a helper it started (an exporter, a housekeeping loop), whatever CPU the helper used. In a
    process pipeline only the worker processes are peers (the consumer does other work), and
    only uneven load is this check's to say (stage_bound sizes the pool).

Why it matters:
    A saturated worker is one core's worth of throughput: with fewer busy workers than usable
    cores, cores stay idle; with uneven load, the busiest worker limits the service while the
    others wait. Never the verdict over a resource every request queues on (a lock, the GIL, a
    pool): the spread is then the queue's symptom, and balancing it buys nothing
    (checks/arbiter.py, rule 8).

What to do instead:
    Run one worker process per usable core (gunicorn `-w`, uvicorn `--workers`, the pool's
    size). Uneven load: let the kernel balance accepts (gunicorn `--reuse-port`, SO_REUSEPORT),
    shorten keep-alive, or hand work out from one shared queue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.report.model.findings import Fix
from diagnose.checks.base import Finding, make_finding, pct, ramp
from diagnose.model.process_pipeline import ProcessPipeline
from diagnose.model.service import Service, fleet, worker_load

ID = "worker_imbalance"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Worker processes are unevenly loaded or too few"
    what: str = ("CPU of each worker process over the window: how unevenly the work spreads (coefficient of "
                 "variation), and how many usable cores stay idle while the busy workers are saturated.")
    advice: tuple[str, ...] = (
        ("Re-measure after each change: a worker count above the cores adds context switches and memory, not "
         "throughput."),
    )
    imbalance_low: float = 0.35
    imbalance_high: float = 1.0
    idle_cores_low: float = 0.25
    idle_cores_high: float = 0.6
    saturated_core_share: float = 0.7


@dataclass(frozen=True, kw_only=True)
class ImbalanceEvidence(Measurements):
    workers: int = key("worker processes", U.PROCESSES)
    usable_cores: float | None = shared_key()
    cores_busy_per_worker: dict[str, float] = key("cores kept busy per worker (pid: cores)", U.CORES)
    load_coefficient_of_variation: float = key(
        "load spread across workers (coefficient of variation)", U.NUMBER)
    idle_core_share: float = key("share of usable cores left idle", U.PERCENT)
    saturated_workers: int = key("saturated workers", U.PROCESSES)
    fix: Fix | Omitted = shared_key(optional=True)


EVIDENCE = declarations(ImbalanceEvidence)


_SERVERS = {"gunicorn": "gunicorn `-w {n}`", "uvicorn": "uvicorn `--workers {n}`"}


def server_kind(service: Service) -> tuple[str, ...]:
    """The pre-fork servers the tree runs (from cmdlines and frames): their flags only for them."""
    text = " ".join(" ".join(getattr(v, "cmdline", None) or ()) for v in service.processes).lower()
    profile = getattr(service.combined, "profile", None)
    files = {f.file for f in getattr(profile, "frames", ()) if not f.native}
    return tuple(name for name in _SERVERS
                 if name in text or any(f"{name}/" in file for file in files))


def _workers_advice(n: int, service: Service, pipeline: ProcessPipeline | None) -> str:
    if pipeline is not None:
        call = pipeline.knob()[1]
        return (f"Run {n} worker processes, one per usable core: `{call.format(n=n)}`: each "
                f"saturated worker is one core's worth of throughput.")
    flags = [_SERVERS[k].format(n=n) for k in server_kind(service)]
    how = ", ".join(flags) if flags else "the process count of whatever starts them"
    return (f"Run {n} worker processes, one per usable core ({how}): each saturated worker is "
            f"one core's worth of throughput.")


def worker_imbalance(service: Service, settings: Settings, pipeline: ProcessPipeline | None = None
                     ) -> Finding | None:
    """Workers that share the load unevenly, or fewer busy workers than usable cores. In a
    process pipeline only the worker processes are peers (the consumer does other work)."""
    if pipeline is not None:
        workers = [v for v in service.processes if v.pid in pipeline.producer_pids]
    else:
        # Only peers compare: siblings running one program, serving requests (model/service.py
        # fleet). A server beside its own child (an exporter, a housekeeping loop) is no fleet
        # and has no worker count to turn: what limits it is found inside it.
        workers = list(fleet(service.processes))
        if not workers:
            return None
    load = worker_load(workers)
    if len(workers) == 0 or np.isnan(load).all():
        return None
    load = np.nan_to_num(load, nan=0.0)
    os_ = service.combined.os
    cores = os_.usable_cores if os_ is not None else None
    total = float(load.sum())
    mean = total / len(workers)
    cv = float(load.std() / mean) if mean > 0 and len(workers) > 1 else 0.0
    saturated = load >= settings.saturated_core_share
    idle_cores = max(0.0, (cores - total)) / cores if cores else 0.0
    # Uneven: some workers do most of the work while the service is loaded at all.
    uneven = ramp(cv, settings.imbalance_low, settings.imbalance_high) * min(1.0, total / 0.5)
    # Too few: every busy worker is saturated, yet usable cores stay idle. In a process pipeline
    # stage_bound sizes the pool from the consumer's starvation (the utilization law), so only
    # uneven load is this check's to say there.
    too_few = (ramp(idle_cores, settings.idle_cores_low, settings.idle_cores_high)
               * (float(saturated.sum()) / len(workers))
               if cores and len(workers) < cores and pipeline is None else 0.0)
    score = max(uneven, too_few)
    evidence = ImbalanceEvidence(workers=len(workers), usable_cores=cores,
                                 cores_busy_per_worker={str(w.pid): round(float(c), 3) for w, c in zip(workers, load)},
                                 load_coefficient_of_variation=cv, idle_core_share=idle_cores,
                                 saturated_workers=int(saturated.sum()))
    if too_few >= uneven:
        # a fraction of a core (a CPU quota) rounds up: int() would advise 0 workers for 0.5
        n = max(1, math.ceil(cores - 1e-9)) if cores else len(workers) + 1
        evidence = replace(evidence, fix=Fix(pipeline.knob()[0] if pipeline is not None else "workers", n))
        summary = (f"{len(workers)} worker process(es) for {cores:g} usable cores: "
                   f"{int(saturated.sum())} saturated while {pct(idle_cores)} of the cores stayed idle")
        advice = [_workers_advice(n, service, pipeline)]
        room = cores / total if cores and total else 1.0
        gain = (max(1.0, room), f"estimate: the workers use {total:.2f} of {cores:g} usable cores; "
                                f"one saturated worker per core uses all of them")
    else:
        busiest = workers[int(np.argmax(load))]
        summary = (f"{len(workers)} worker processes carry uneven load: from {load.min():.2f} to "
                   f"{load.max():.2f} cores each (busiest pid {busiest.pid})")
        if server_kind(service):
            advice = ["Requests reach the workers unevenly: with keep-alive connections each "
                      "client sticks to one worker. Let the kernel balance accepts (gunicorn "
                      "`--reuse-port`, SO_REUSEPORT), shorten keep-alive, or balance in front of "
                      "the workers."]
        else:
            advice = ["The work reaches the worker processes unevenly: hand it out from one "
                      "shared queue (smaller chunks / tasks) so every worker takes the next item."]
        advice.append("If one worker is busy because of long requests, move that work to a queue "
                      "served by every worker.")
        gain = (max(1.0, float(load.max()) * len(workers) / total) if total else 1.0,
                "estimate: the load of the busiest worker spread evenly over all of them")
    return make_finding(ID, settings, score, summary, evidence,
                        advice=advice + list(settings.advice), gain=gain)


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=None,
                 needs=(Input.PROCESS_TREE,), uses=(Input.OS_COUNTERS,), scope="service")
