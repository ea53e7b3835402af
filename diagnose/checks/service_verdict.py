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

from diagnose.checks import deadlock, stage_bound
from diagnose.checks.arbiter import HUNG_FIRST, hung_or_failing, rank
from diagnose.checks.backend_saturated import ID as BACKEND_ID
from diagnose.checks.base import EvidenceValues, Finding, scoped_summary
from diagnose.checks.engine import (CheckResults, annotated, describe_activity, load_check_settings, order_of,
                                    run_checks, verdict_for, waits_hidden)
from diagnose.checks.pool_transfer import SPEC as TRANSFER_SPEC
from diagnose.checks.pool_transfer import pool_transfer
from diagnose.checks.registry import spec
from diagnose.checks.settings import settings_of
from diagnose.checks.worker_imbalance import ID as IMBALANCE_ID
from diagnose.checks.worker_imbalance import SPEC as IMBALANCE_SPEC
from diagnose.checks.worker_imbalance import worker_imbalance
from diagnose.model.confidence import too_uncertain
from diagnose.model.pool_transfer import find_pool_transfer
from diagnose.model.process_pipeline import ProcessPipeline, find_process_pipeline
from diagnose.model.service import Service, worker_load
from diagnose.vocab import INFO_SCORE, ProcessRole, Severity

WEIGHT_FLOOR_CORES = 0.02  # every worker weighs at least this many cores' worth
WAITING_FOR_WORK = ("underloaded",)  # a peer's own findings that say it waits for requests


def run_service_checks(service: Service, user_rules: dict[str, Any] | None = None
                       ) -> tuple[CheckResults, dict[int | None, CheckResults]]:
    """The service's results, and each process's own results by pid."""
    per_process = {view.pid: run_checks(view.analysis, user_rules) for view in service.processes}
    if not service.multi:
        return per_process[service.processes[0].pid], per_process
    workers = service.workers() or [v for v in service.processes
                                    if v.role not in (ProcessRole.HELPER, ProcessRole.PEER)]
    weights = np.nan_to_num(worker_load(workers), nan=0.0) + WEIGHT_FLOOR_CORES
    merged = _merge([per_process[w.pid] for w in workers], [w.pid for w in workers], weights)
    settings = load_check_settings(user_rules)
    pipeline = find_process_pipeline(service)
    staged = stage_bound.run_processes(pipeline, service, settings_of(stage_bound.SPEC, settings))
    if staged is not None:
        # One stage finding per service: the one spanning processes names the whole pipeline.
        merged = [f for f in merged if f.id != stage_bound.ID] + [staged]
    transfer = pool_transfer(find_pool_transfer(pipeline, service), settings_of(TRANSFER_SPEC, settings))
    if transfer is not None:
        merged.append(transfer)
    fleet = worker_imbalance(service, settings_of(IMBALANCE_SPEC, settings), pipeline)
    if fleet is not None:
        merged.append(fleet)
    if not any(f.id == deadlock.ID and f.score > 0 for f in merged):
        # A knot across processes (a parent waiting for a child that waits for it), which no
        # process's own check sees: the service's deadlock.
        hung = deadlock.run_service(service, settings_of(deadlock.SPEC, settings))
        if hung is not None:
            merged = [f for f in merged if f.id != deadlock.ID] + [annotated(deadlock.SPEC, hung, service.combined)]
    ranked = _stage_first(rank(merged, order_of), staged, pipeline)
    ranked = tuple(_with_peer_verdict(f, per_process) for f in ranked)
    first = per_process[workers[0].pid]
    applicable = {f.id for f in ranked}
    skipped = tuple(n for n in first.not_applicable if n.id not in applicable)
    return (CheckResults(ranked, skipped, verdict_for(ranked, describe_activity(service.combined),
                                                     waits_hidden(service.combined))),
            per_process)


def _with_peer_verdict(finding: Finding, per_process: dict[int | None, CheckResults]) -> Finding:
    """A backend the service waits on, sampled with it (attach --follow-peers): the chain goes
    on into the backend, and its own leading finding says where its time goes. Its words, sites
    and first advice join the service's finding, as the lever at the end of the chain beside
    "run more of it"."""
    value = finding.evidence.get("backend_sampled_pid") if finding.id == BACKEND_ID else None
    pid = int(value) if isinstance(value, (int, float)) else None
    peer = per_process.get(pid) if pid is not None else None
    # The backend is at its capacity (the finding says so): where its work goes, not its
    # connection threads waiting for their clients' next request (underloaded, in its own eyes).
    # Its finding joins whenever it may show a problem (its score interval reaches the info
    # line): the backend's cpu_bound scored 29 (0-60) replayed and under 25 live on CI, and the
    # chain lost its last hop on a point score at the threshold.
    own = (next((f for f in peer.findings if f.score > 0 and f.score_range[1] >= INFO_SCORE
                 and f.id not in WAITING_FOR_WORK), None)
           if peer is not None else None)
    if own is None:
        return finding
    where = f" at {own.sites[0].function}" if own.sites else ""
    summary = (f"{finding.summary}; inside the backend (pid {pid}, its stacks sampled with the "
               f"service){where}: {own.title[:1].lower()}{own.title[1:]} — {own.summary}")
    cheaper = ((f"Or make each of the backend's requests cheaper where its time goes{where}: "
                f"{own.advice[0]}",) if own.advice else ())
    advice = finding.advice[:1] + cheaper + finding.advice[1:]
    return dataclasses.replace(finding, summary=summary, advice=advice,
                               sites=finding.sites + own.sites[:2])


def _stage_first(ranked: tuple[Finding, ...], staged: Finding | None,
                 pipeline: ProcessPipeline | None) -> tuple[Finding, ...]:
    """A process pipeline's findings from its own processes (a worker's busy Python, the
    consumer's waits) describe parts of one stage: the stage's finding, whenever it shows a
    problem (its score interval reaches the info line), leads them (it says which part limits
    the whole and names the transform they ran; its second advice is that transform made
    cheaper). Not a line at critical strength: the stage's score is the product of the
    workers' busy share and the consumer's starved share, and dataloader_job's moved across 75
    (74-100) with the workers' /proc busy share between attaches. The
    stage never moves ahead of a finding that the service is hung or will fail (arbiter rule 2),
    which leads whatever the gains."""
    if staged is None or staged.score_range[1] < INFO_SCORE:
        return ranked  # no problem shown even at the high end of its interval
    assert pipeline is not None  # a stage finding spans a pipeline (stage_bound.run_processes)
    members = {pipeline.consumer_pid, *pipeline.producer_pids}
    rest = [f for f in ranked if f is not staged]
    first = next((i for i, f in enumerate(rest) if not hung_or_failing(f)
                  and (f.evidence.get("pid") in members or f.id == IMBALANCE_ID)), len(rest))
    before = [f for f in rest[:first]]
    return tuple(before + [staged] + rest[first:])


def _merge(results: list[CheckResults], pids: list[int | None], weights: np.ndarray) -> list[Finding]:
    by_id: dict[str, dict[int, Finding]] = {}
    for index, result in enumerate(results):
        for finding in result.findings:
            by_id.setdefault(finding.id, {})[index] = finding
    total_weight = float(weights.sum())
    merged = []
    for found in by_id.values():
        score = sum(weights[i] * f.score for i, f in found.items()) / total_weight
        lead = max(found, key=lambda i: weights[i] * found[i].score)
        if any(f.id in HUNG_FIRST for f in found.values()):
            # A hung worker weighs nothing by CPU, yet every request sent to it hangs.
            lead = max(found, key=lambda i: (found[i].score, weights[i]))
            score = found[lead].score
        finding = found[lead]
        held = sum(1 for f in found.values() if f.severity != Severity.OK)
        evidence = dict(finding.evidence)
        evidence.update({"pid": pids[lead], "worker_processes": len(results),
                         "processes_with_finding": held,
                         "score_per_process": {str(pids[i]): f.score for i, f in found.items()}})
        summary = finding.summary
        if len(results) > 1 and not spec(finding.id).machine_wide:
            summary = scoped_summary(summary, held, len(results))
        score = int(round(score))
        samples, low = _pooled_confidence(list(found.values()), finding)
        basis = finding.intervals.get(finding.basis_key or "")
        own = basis.samples if basis is not None else finding.samples
        rescored = _narrowed(finding.rescored(score), own, samples)
        merged.append(dataclasses.replace(rescored, summary=summary, evidence=EvidenceValues.of(evidence),
                                          samples=samples, low_confidence=low))
    return merged


def _narrowed(finding: Finding, own: float | None, pooled: int | None) -> Finding:
    """The service's score and gain intervals rest on the pooled samples: an interval's width
    shrinks as one over the square root of the samples behind it."""
    if not own or not pooled or pooled <= own:
        return finding
    factor = (own / pooled) ** 0.5

    def shrink(interval: tuple[float, float] | None, point: float | None) -> tuple[float, float] | None:
        if interval is None or point is None:
            return interval
        low, high = interval
        return (point - (point - low) * factor, point + (high - point) * factor)

    score = shrink(finding.score_interval, finding.score)
    gain = shrink(finding.gain_interval, finding.predicted_gain)
    return dataclasses.replace(
        finding,
        score_interval=None if score is None else (int(round(score[0])), int(round(score[1]))),
        gain_interval=None if gain is None else (round(gain[0], 2), round(gain[1], 2)))


def _pooled_confidence(found: list[Finding], lead: Finding) -> tuple[int | None, bool]:
    """The service's share pools the samples of its workers: the share the findings rest on,
    weighted by their samples, over all their samples (three workers' 61 samples each at 94-100%
    are one share of 183). (samples, low confidence)."""
    key = lead.basis_key
    entries = [(f.evidence.get(key), f.intervals.get(key)) for f in found if key is not None]
    rows = [(float(s), int(e.samples or 0) if e else 0, int(e.calibrated_of or 0) if e else 0)
            for s, e in entries if isinstance(s, (int, float)) and not isinstance(s, bool)]
    rows = [r for r in rows if r[1]]
    if not rows:
        return lead.samples, lead.low_confidence
    pooled_n = _pooled_count(rows)
    weight = sum(n for _, n, _ in rows)
    pooled_share = sum(s * n for s, n, _ in rows) / weight
    return pooled_n, too_uncertain(pooled_share, pooled_n)


def _pooled_count(rows: list[tuple[float, int, int]]) -> int:
    """The samples a pooled share rests on. Independent samples add up; calibrated states do not:
    the workers' alike stacks are calibrated by the same few native samples (one process per
    program is unwound natively, collect/plan.py), so each worker's calibration term
    (1/effective - 1/samples, confidence.calibrated_samples) is kept, weighted by its samples,
    and only the sampling term shrinks with the pooled samples."""
    if not any(of for _, _, of in rows):
        return sum(n for _, n, _ in rows)
    drawn = [(of or n, n) for _, n, of in rows]  # (samples, effective count)
    total = sum(of for of, _ in drawn)
    spread = sum(of / total * max(0.0, 1.0 / n - 1.0 / of) for of, n in drawn)
    return max(1, int(round(1.0 / (1.0 / total + spread))))
