"""The service's verdict from its processes' findings.

Every check runs on each process alone. The service's findings are those of its worker
processes, merged per check: a finding's service score is the mean of the workers' scores
weighted by the CPU each worker used (a worker that did nothing says little about the service;
when none used CPU, all weigh the same). The merged finding keeps the words, sites and advice of
the worker where it weighed most, and says in how many workers it held. A master's own findings
(its waits for signals and children) are shown beside its row of the process table, never merged.
Fleet findings (worker_imbalance) come from comparing the workers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from diagnose.checks import stage_bound
from diagnose.checks.arbiter import CRITICAL, rank
from diagnose.checks.base import Finding, load_check_settings, make_finding, pct, ramp
from diagnose.checks.engine import (CheckResults, describe_activity, order_of, run_checks, verdict_for,
                                    waits_hidden)
from diagnose.model.process_pipeline import ProcessPipeline, find_process_pipeline
from diagnose.model.service import Service, worker_load
from diagnose.model.vocab import ProcessRole, Severity

WEIGHT_FLOOR_CORES = 0.02  # every worker weighs at least this many cores' worth
IMBALANCE_ID = "worker_imbalance"


def run_service_checks(service: Service, user_rules: dict | None = None
                       ) -> tuple[CheckResults, dict]:
    """The service's results, and each process's own results by pid."""
    per_process = {view.pid: run_checks(view.analysis, user_rules) for view in service.processes}
    if not service.multi:
        return per_process[service.processes[0].pid], per_process
    workers = service.workers() or [v for v in service.processes if v.role != ProcessRole.HELPER]
    weights = np.nan_to_num(worker_load(workers), nan=0.0) + WEIGHT_FLOOR_CORES
    merged = _merge([per_process[w.pid] for w in workers], [w.pid for w in workers], weights)
    settings = load_check_settings(user_rules)
    pipeline = find_process_pipeline(service)
    staged = stage_bound.run_processes(pipeline, service, settings[stage_bound.ID])
    if staged is not None:
        # One stage finding per service: the one spanning processes names the whole pipeline.
        merged = [f for f in merged if f.id != stage_bound.ID] + [staged]
    fleet = worker_imbalance(service, settings[IMBALANCE_ID], pipeline)
    if fleet is not None:
        merged.append(fleet)
    ranked = _stage_first(rank(merged, order_of), staged, pipeline)
    first = per_process[workers[0].pid]
    applicable = {f.id for f in ranked}
    skipped = tuple(n for n in first.not_applicable if n.id not in applicable)
    return (CheckResults(ranked, skipped, verdict_for(ranked, describe_activity(service.combined),
                                                     waits_hidden(service.combined))),
            per_process)


def _stage_first(ranked: tuple[Finding, ...], staged: Finding | None,
                 pipeline: ProcessPipeline | None) -> tuple[Finding, ...]:
    """A process pipeline's findings from its own processes (a worker's busy Python, the
    consumer's waits) describe parts of one stage: the stage's finding, at critical strength,
    leads them (it says which part limits the whole and names the transform they ran)."""
    if staged is None or staged.score < CRITICAL:
        return ranked
    assert pipeline is not None  # a stage finding spans a pipeline (stage_bound.run_processes)
    members = {pipeline.consumer_pid, *pipeline.producer_pids}
    rest = [f for f in ranked if f is not staged]
    first = next((i for i, f in enumerate(rest) if f.evidence.get("pid") in members
                  or f.id == IMBALANCE_ID), len(rest))
    before = [f for f in rest[:first]]
    return tuple(before + [staged] + rest[first:])


def _merge(results: list[CheckResults], pids: list, weights: np.ndarray) -> list[Finding]:
    by_id: dict[str, dict] = {}
    for index, result in enumerate(results):
        for finding in result.findings:
            by_id.setdefault(finding.id, {})[index] = finding
    total_weight = float(weights.sum())
    merged = []
    for found in by_id.values():
        score = sum(weights[i] * f.score for i, f in found.items()) / total_weight
        lead = max(found, key=lambda i: weights[i] * found[i].score)
        finding = found[lead]
        held = sum(1 for f in found.values() if f.severity != Severity.OK)
        evidence = dict(finding.evidence)
        evidence.update({"pid": pids[lead], "worker_processes": len(results),
                         "processes_with_finding": held,
                         "score_per_process": {str(pids[i]): f.score for i, f in found.items()}})
        summary = finding.summary
        if len(results) > 1:
            summary = f"in {held} of {len(results)} worker processes: {summary}"
        score = int(round(score))
        merged.append(dataclasses.replace(finding.rescored(score), summary=summary, evidence=evidence))
    return merged


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


def worker_imbalance(service: Service, settings, pipeline: ProcessPipeline | None = None
                     ) -> Finding | None:
    """Workers that share the load unevenly, or fewer busy workers than usable cores. In a
    process pipeline only the worker processes are peers (the consumer does other work)."""
    workers = [v for v in service.processes if v.role == ProcessRole.WORKER]
    if pipeline is not None:
        workers = [v for v in service.processes if v.pid in pipeline.producer_pids]
    elif len(workers) < 2 and not any(v.role == ProcessRole.MASTER for v in service.processes):
        # No fleet: one serving process beside its helpers (an exporter, a load driver) has no
        # worker count to turn; what limits it is found inside it.
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
    saturated = load >= settings["saturated_core_share"]
    idle_cores = max(0.0, (cores - total)) / cores if cores else 0.0
    # Uneven: some workers do most of the work while the service is loaded at all.
    uneven = ramp(cv, settings["imbalance_low"], settings["imbalance_high"]) * min(1.0, total / 0.5)
    # Too few: every busy worker is saturated, yet usable cores stay idle. In a process pipeline
    # stage_bound sizes the pool from the consumer's starvation (the utilization law), so only
    # uneven load is this check's to say there.
    too_few = (ramp(idle_cores, settings["idle_cores_low"], settings["idle_cores_high"])
               * (float(saturated.sum()) / len(workers))
               if cores and len(workers) < cores and pipeline is None else 0.0)
    score = max(uneven, too_few)
    evidence: dict[str, Any]  # declared apart: tests/unit/test_evidence_labels.py reads `evidence = {`
    evidence = {"workers": len(workers), "usable_cores": cores,
                "cores_busy_per_worker": {str(w.pid): round(float(c), 3) for w, c in zip(workers, load)},
                "load_coefficient_of_variation": cv, "idle_core_share": idle_cores,
                "saturated_workers": int(saturated.sum())}
    if too_few >= uneven:
        n = int(cores) if cores else len(workers) + 1
        evidence["fix"] = ({"knob": pipeline.knob()[0], "value": n} if pipeline is not None
                           else {"knob": "workers", "value": n})
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
    return make_finding(IMBALANCE_ID, settings, score, summary, evidence,
                        advice=advice + list(settings.get("advice", [])), gain=gain)
