"""compute_bound: the cores are busy and the busy time is model compute.

What it finds:
    The CPU utilization of the usable cores, and the share of busy request samples in model
    compute (of the bottleneck stage's threads in a pipeline or batching server). The cores are
    busy only if /proc says the threads ran: the OS counters have the last word. Where those
    threads call an intra-op pool (a BLAS or OpenMP pool in their native samples), the pool's
    threads, which no Python sample sees, compute the model too: the kernel's count of their
    CPU joins the model's share. A thread on the line that takes a lock is taking the lock,
    not computing the model its block calls, whatever state its samples were calibrated as.
    Time the request threads queue on a native library's internal mutex (OpenBLAS lets one
    caller at a time into its pool) is a wait: the score keeps only the share not queued.

Why it matters:
    The service is genuinely compute-bound in the model: no change of threads or structure buys
    throughput; only a cheaper model or more cores do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pandas as pd

from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.model.confidence import calibrated_samples
from diagnose.checks.base import (Finding, NotApplicable, ScoreBasis, Site, busy_samples,
                                  make_finding, pct, ramp, top_sites)
from diagnose.model.counters import running_agreement
from diagnose.model.native_pools import pool_split
from diagnose.vocab import LOCK_KINDS, ThreadState

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.report.model.sections import Stage

ID = "compute_bound"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "The cores are busy with model compute"
    what: str = "CPU utilization of the usable cores, and the share of busy request samples in model compute."
    advice: tuple[str, ...] = (
        ("The service is genuinely compute-bound in the model: the remaining levers are the model itself "
         "(quantization, pruning, distillation, operator fusion, a faster runtime such as ONNX Runtime or OpenVINO)."),
        "Use dynamic batching with a fixed thread pool: batches favour compute-dense operators and cache reuse.",
        "Re-sweep the intra-op thread count after any model-format change (e.g. FP32 to INT8 moves the optimum).",
        "If latency matters more than throughput, scale out: more cores or more replicas.",
    )
    low: float = 0.4
    high: float = 0.8
    min_utilization: float = 0.6


@dataclass(frozen=True, kw_only=True)
class ComputeEvidence(Measurements):
    model_share_of_busy: float = shared_key()
    busy_request_threads: float = key("busy threads (mean)", U.THREADS)
    core_utilization_from_samples: float = key("share of usable cores kept busy (from samples)", U.PERCENT)
    os_cpu_utilization: float | None = key(
        "CPU used, share of usable cores (OS)", U.PERCENT, none=NOT_MEASURED)
    runnable_per_core: float | None = shared_key()
    native_mutex_wait_share: float = shared_key()
    busy_samples: int = shared_key()
    running_samples: int = key("running samples (not waiting for the GIL) behind the model share", U.SAMPLES)
    sampled_cores: float = shared_key()
    measured_cores: float | None = shared_key()
    stage: str | Omitted = shared_key(optional=True)
    model_share_with_pool: float | Omitted = key(
        "model compute with the intra-op pool's threads, share of the threads' CPU (the kernel)", U.PERCENT,
        optional=True)
    counters_note: str | Omitted = shared_key(optional=True)


EVIDENCE = declarations(ComputeEvidence)


@dataclass(frozen=True)
class PoolFold:
    """The CPU of the judged threads and of the intra-op pool working under their model calls,
    by the kernel's counters: the pool's threads have no Python frames, so no sample sees their
    compute, yet it is the model's."""

    threads_cpu_s: float
    pool_cpu_s: float
    pool_threads: int

    def share(self, sampled: float) -> float:
        """The model's share of the CPU of the judged threads and the pool together, where
        `sampled` is its share of the judged threads' running samples."""
        total = self.threads_cpu_s + self.pool_cpu_s
        return (sampled * self.threads_cpu_s + self.pool_cpu_s) / total if total else sampled


def _pool_fold(analysis: Analysis, tids: list[int]) -> PoolFold | None:
    """The pool's CPU to fold into the model's share, where the native samples show the judged
    threads calling into a compute library's pool and the kernel saw that pool's threads work;
    None otherwise (without native frames the pool's threads could be anything's)."""
    os_ = analysis.os
    if os_ is None or not analysis.working_native_threads:
        return None
    if not any(split.kernel_samples for split in pool_split(analysis.native, set(tids))):
        return None
    threads_cpu = sum(os_.threads[t].cpu_s for t in tids if t in os_.threads)
    if threads_cpu <= 0:
        return None
    return PoolFold(threads_cpu, analysis.working_native_cpu_s, analysis.working_native_threads)


def _reference(analysis: Analysis) -> tuple[pd.DataFrame, int, Stage | None]:
    """The threads whose compute is judged: the bottleneck stage of a pipeline or batching
    server (the batcher runs the model for everyone), else the request threads."""
    structure = analysis.structure
    stage = structure.stage(structure.bottleneck) if structure.bottleneck else None
    if structure.pipeline and stage is not None:
        samples = analysis.samples[analysis.samples["thread"].isin(analysis.stage_threads(stage))]
        return samples, len(stage.tids), stage
    return analysis.request_samples(), len(analysis.request_threads), None


def _tids(analysis: Analysis, stage: Stage | None) -> list[int]:
    if stage is not None:
        return list(stage.tids)
    return [int(t) for t in analysis.request_threads["tid"]]


def _lock_sites(samples: pd.DataFrame) -> set[int]:
    """The lines where the threads waited on a lock. A thread running there is taking the lock
    (woken and handed it, or queued for a core to take it), whatever its state was calibrated
    as: the line's own Python work is the `with`, not the model its block calls."""
    return set(samples.loc[samples["wait_kind"].isin(LOCK_KINDS), "site"].unique())


# A native mutex queue at least this share of the request threads' time is named in the summary.
QUEUED_NOTE_SHARE = 0.1


def run(analysis: Analysis, settings: Settings) -> Finding | NotApplicable:
    req, n_threads, stage = _reference(analysis)
    total = float(req["count"].sum())
    busy = busy_samples(req)
    total_busy = float(busy["count"].sum())
    if total_busy == 0:
        return NotApplicable(ID, "request threads were never busy")
    # What the cores run is judged on running samples: a thread waiting for the GIL is busy
    # (it wants a core) but computes nothing, and GIL noise would swing the model's share.
    running = busy[busy["state"] != ThreadState.GIL]
    total_running = float(running["count"].sum()) or total_busy
    model = running[(running["phase"] == "model") & ~running["site"].isin(_lock_sites(req))]
    sampled_share = float(model["count"].sum()) / total_running
    # An intra-op pool's threads compute the model beside the threads that call it: the kernel
    # counts their CPU where no sample sees it, and the share counts it as the model's.
    fold = _pool_fold(analysis, _tids(analysis, stage))
    share = fold.share(sampled_share) if fold is not None else sampled_share
    # Busy request threads per usable core, from the samples: a thread busy in 99% of its
    # samples keeps a core busy. OS CPU time is reported too but not scored, because py-spy's
    # pauses (blocking mode) take CPU time away from the target while it is observed.
    cores = analysis.os.usable_cores if analysis.os is not None else analysis.run.target.cores
    busy_threads = total_busy / (total / n_threads)
    utilization = min(1.0, busy_threads / cores) if cores else total_busy / total
    os_utilization = analysis.os.cpu_utilization if analysis.os is not None else None
    if os_utilization is not None:
        # Native pool threads (a BLAS pool under the batcher) have no Python frames: only the
        # OS sees them fill the cores.
        utilization = max(utilization, min(1.0, os_utilization))
    busy_factor = min(1.0, utilization / settings.min_utilization)
    score = ramp(share, settings.low, settings.high) * busy_factor
    # The cores are busy only if /proc says the threads ran: the counters have the last word.
    counters = running_agreement(analysis, req)
    score *= counters.factor
    runnable_per_core = None
    if analysis.os is not None and analysis.os.usable_cores:
        runnable_per_core = analysis.os.mean_runnable / analysis.os.usable_cores
    # Request threads queued on a native library's internal mutex (OpenBLAS lets one caller at a
    # time into its pool) wait while the cores idle between calls: "the cores already run the
    # model" holds only for the time not queued there. The counters do not always say so (a CI
    # attach of blas_service queued 62% of the time, cores 68% busy, read compute_bound 100).
    native_mutex_share = analysis.native_mutex_share
    not_queued = max(0.0, 1.0 - native_mutex_share)
    score *= not_queued
    evidence = ComputeEvidence(model_share_of_busy=sampled_share, busy_request_threads=busy_threads,
                               core_utilization_from_samples=utilization, os_cpu_utilization=os_utilization,
                               runnable_per_core=runnable_per_core, native_mutex_wait_share=native_mutex_share,
                               busy_samples=int(total_busy), running_samples=int(total_running),
                               sampled_cores=counters.sampled, measured_cores=counters.measured)
    hot = top_sites(analysis, model, total_busy)
    sites = list(hot)
    who = "request-thread"
    if stage is not None:
        who = f"{stage.name}'s"
        evidence = replace(evidence, stage=stage.name)
        sites.insert(0, Site(stage.function, stage.file, stage.line, stage.utilization))
    summary = (f"cores {pct(min(utilization, 1.0))} busy; {pct(share)} of {who} busy time "
               f"is model compute" + (f", most in {hot[0].function}" if hot else ""))
    if fold is not None:
        evidence = replace(evidence, model_share_with_pool=share)
        summary += (f"; with the {fold.pool_threads} intra-op pool thread"
                    f"{'s' if fold.pool_threads != 1 else ''} it calls ({fold.pool_cpu_s:.1f} CPU-s, the "
                    f"kernel) the model is {pct(share)} of their CPU")
    if native_mutex_share >= QUEUED_NOTE_SHARE:
        summary += (f"; but the request threads queued on a native library's mutex "
                    f"{pct(native_mutex_share)} of the time, computing nothing")
    if not counters.agrees:
        summary += f" — {counters.note()}"
        evidence = replace(evidence, counters_note=counters.note())
    # Where the states were calibrated (a few native samples give the mix of running and GIL
    # waits to many Python-only ones), which samples ran is known only as well as that few
    # know it: forked_workers' model share read 22-56% across attaches of one service, each
    # interval a few points wide on hundreds of samples.
    calibrated = analysis.profile.calibrated
    return make_finding(ID, settings, score, summary, evidence, sites, samples=total_running,
                        share_samples={"model_share_of_busy": calibrated_samples(busy)} if calibrated else None,
                        calibrated_of={"model_share_of_busy": int(total_running)} if calibrated else None,
                        gain=(1.0, "estimate: no structural gain: the cores already run the model; "
                                   "only a cheaper model or more cores buy throughput"),
                        basis=ScoreBasis("model_share_of_busy",
                                         lambda s: ramp(fold.share(s) if fold is not None else s,
                                                        settings.low, settings.high)
                                         * busy_factor * counters.factor * not_queued))


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(), uses=(Input.OS_COUNTERS, Input.PIPELINE))
