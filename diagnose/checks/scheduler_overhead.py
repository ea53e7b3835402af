"""scheduler_overhead: more runnable threads than cores; threads wait for a CPU.

What it finds:
    Runnable threads per usable core (sampled from /proc) and run-queue wait per CPU-second
    (schedstat); the score is the weaker of the two. Includes the fan-out diagnosis: request
    threads x intra-op threads (OpenMP / MKL / OpenBLAS / torch pools, visible only in
    /proc/<pid>/task) against the cores the process may use, request threads queueing on a
    native library's internal mutex, and an intra-op thread pool that synchronises more than it
    computes while the process leaves cores idle.

Why it matters:
    Threads wait for a core longer than they run: more threads do not make a core faster, they
    add context switches and cache refills.

What to do instead:
    The finding names the sizes to set for the request pool and the intra-op pools it saw, and
    their knobs. A pool that synchronises more than it computes: set it to fewer threads and
    re-measure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import re

from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.report.model.findings import Fix
from diagnose.checks.base import (Finding, Site, amdahl, core_room, make_finding, ramp, serial_gain,
                                  top_sites)
from diagnose.model.native_pools import LIBRARIES
from diagnose.vocab import BUSY

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.model.native_pools import PoolSplit

ID = "scheduler_overhead"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Too many threads for the cores"
    what: str = ("Runnable threads per usable core (sampled from /proc) and run-queue wait per CPU-second "
                 "(schedstat); the score is the weaker of the two.")
    advice: tuple[str, ...] = (
        ("Threads wait for a core longer than they run: cut the total number of busy threads to the number of "
         "physical cores."),
        ("Request threads multiply with intra-op threads (torch/OpenMP/MKL/OpenBLAS pools): set both knobs so that "
         "request threads x intra-op threads <= cores (torch.set_num_threads, OMP_NUM_THREADS, the request pool "
         "size)."),
        ("Leave one or two cores to the OS and the web/IO threads; pin compute threads to physical cores where the "
         "platform allows."),
    )
    intra_op_title: str = "An intra-op thread pool synchronises more than it computes"
    oversubscription_low: float = 1.2
    oversubscription_high: float = 3.0
    native_mutex_low: float = 0.1
    native_mutex_high: float = 0.5
    # intra-op pool synchronisation (spin / yield / futex in OpenBLAS, OpenMP, ...) vs its kernels
    pool_sync_low: float = 0.3
    pool_sync_high: float = 0.55
    pool_idle_core_room: float = 1.4  # ...and the process leaves this much CPU unused (usable / used cores)
    low: float = 0.5
    high: float = 2.0


@dataclass(frozen=True, kw_only=True)
class SchedulerEvidence(Measurements):
    runqueue_wait_per_cpu_second: float = key("time waiting for a core, per CPU-second run", U.SECONDS)
    runqueue_wait_s: float | None = key("time waiting for a core (run queue), summed over threads", U.SECONDS)
    cpu_s: float = key("CPU time used", U.SECONDS)
    mean_runnable_threads: float = key("runnable threads (mean)", U.THREADS)
    usable_cores: float = shared_key()
    affinity_cores: int = key("cores in the CPU affinity mask", U.CORES, none=NOT_MEASURED)
    cgroup_cpu_quota_cores: float | None = key("cgroup CPU quota", U.CORES, none="no quota")
    runnable_per_core: float | None = shared_key()
    threads: int = key("threads in the process (most at once)", U.THREADS)
    request_threads: int = shared_key()
    intra_op_threads: int = key("intra-op pool threads (native)", U.THREADS)
    intra_op_libraries: str | None = key("libraries with an intra-op pool", U.TEXT, none="none seen")
    native_mutex_wait_share: float = shared_key()
    threads_per_core: float | None = key("threads per usable core", U.NUMBER, none=NOT_MEASURED)
    involuntary_ctx_per_s: float | None = key(
        "involuntary context switches (preempted)", U.PER_S, none=NOT_MEASURED)
    voluntary_ctx_per_s: float | None = key(
        "voluntary context switches (blocked)", U.PER_S, none=NOT_MEASURED)
    fix: Fix = shared_key()
    # The intra-op pool's finding: its synchronisation, read from its native samples.
    intra_op_library: str | Omitted = key("library whose pool synchronises", U.TEXT, optional=True)
    intra_op_sync_share: float | Omitted = key(
        "share of the pool's native samples synchronising", U.PERCENT, optional=True)
    intra_op_sync_share_95_low: float | Omitted = key(
        "share synchronising, 95% lower bound", U.PERCENT, interval=False, optional=True)
    cores_in_use: float | None | Omitted = key("cores in use", U.CORES, none=NOT_MEASURED, optional=True)
    intra_op_sync_samples: int | Omitted = key("native samples synchronising", U.SAMPLES, optional=True)
    intra_op_kernel_samples: int | Omitted = key("native samples in kernels", U.SAMPLES, optional=True)
    native_samples_used: int | Omitted = key("native samples of the pool", U.SAMPLES, optional=True)
    intra_op_sync_functions: dict[str, int] | Omitted = key(
        "synchronisation functions", U.SAMPLES, optional=True)
    intra_op_kernel_functions: dict[str, int] | Omitted = key("kernel functions", U.SAMPLES, optional=True)
    knob: str | Omitted = key("setting to change", U.TEXT, optional=True)
    knob_value: int | Omitted = key("value to set it to", U.NUMBER, optional=True)


EVIDENCE = declarations(SchedulerEvidence)
_POOLS = [("OpenBLAS", re.compile(r"openblas", re.I)), ("MKL", re.compile(r"libmkl|libiomp", re.I)),
          ("OpenMP", re.compile(r"libgomp|libomp", re.I)), ("torch", re.compile(r"libtorch|libc10|libdnnl", re.I)),
          ("onnxruntime", re.compile(r"onnxruntime", re.I))]


def intra_op_libraries(analysis: Analysis) -> list[str]:
    files = {f.file for f in analysis.profile.frames if f.native} | analysis.profile.calibration_files
    return [name for name, pattern in _POOLS if any(pattern.search(path) for path in files)]


def fan_out_advice(request_threads: int, intra_op: int, cores: float, libraries: list[str]) -> list[str]:
    cores_int = max(1, int(cores))
    if intra_op and request_threads:
        per_request = max(1, cores_int // request_threads)
        pool = max(1, cores_int // max(1, intra_op))
        knobs = "torch.set_num_threads({n}), OMP_NUM_THREADS={n}, OPENBLAS_NUM_THREADS={n}, MKL_NUM_THREADS={n}"
        return [
            f"{request_threads} request threads each fan out into a pool of ~{intra_op} intra-op threads "
            f"({', '.join(libraries) or 'native'}) on {cores:g} usable cores: up to "
            f"{request_threads * (intra_op + 1)} threads compete for the cores.",
            "Either give each request one core's share of intra-op threads — "
            + knobs.format(n=per_request)
            + f" — or keep the intra-op pool and cut the request pool to {pool} thread(s).",
            "Keep request threads x intra-op threads <= physical cores; re-measure P99 after each change.",
        ]
    return [f"Cut the number of busy request threads towards the {cores:g} usable cores "
            f"(today {request_threads}); queue the rest of the requests instead of running them all."]


def run(analysis: Analysis, settings: Settings) -> Finding:
    """Runnable threads beyond the cores waiting for one, or request threads queued on a native pool's mutex."""
    os_ = analysis.os
    # needs SCHEDSTAT: the engine runs this check only with the per-thread OS counters
    assert os_ is not None and os_.runqueue_ratio is not None
    cores = os_.usable_cores
    ratio = os_.runqueue_ratio
    oversubscription = os_.mean_runnable / cores if cores else 0.0
    # Both must hold: more runnable threads than cores, and threads waiting for a core a long
    # time per second they run. Run-queue wait alone misleads: the sampler itself takes a core.
    score = min(ramp(oversubscription, settings.oversubscription_low, settings.oversubscription_high),
                ramp(ratio, settings.low, settings.high))
    # only a pool that ran competes for the cores: an idle one created at import fans nothing out
    intra_op = analysis.working_native_threads
    request_threads = int(len(analysis.request_threads))
    libraries = intra_op_libraries(analysis)
    # Fan-out that serializes instead of oversubscribing: request threads queue on a native
    # library's internal mutex (OpenBLAS lets one caller at a time into its thread pool).
    native_mutex_share = analysis.native_mutex_share
    if intra_op and libraries:
        score = max(score, ramp(native_mutex_share, settings.native_mutex_low,
                                settings.native_mutex_high))
    req = analysis.request_samples()
    busy = req[req["state"].isin(BUSY)]
    sites = top_sites(analysis, busy, float(busy["count"].sum()) or 1.0, limit=3)
    fan = f" = {request_threads} request x {intra_op} intra-op" if intra_op else ""
    summary = (f"{os_.mean_runnable:.1f} runnable threads on {cores:g} usable cores; threads waited "
               f"{'at least ' if os_.runqueue_ratio_floor else ''}{ratio:.2f} s for a core per CPU-second "
               f"({os_.threads_max} threads{fan})")
    if native_mutex_share >= settings.native_mutex_low and libraries:
        summary = (f"{request_threads} request threads fan out into {', '.join(libraries)}'s pool of "
                   f"{intra_op} thread{'s' if intra_op != 1 else ''} on {cores:g} usable cores and queue "
                   f"on its internal mutex "
                   f"{100 * native_mutex_share:.0f}% of the time; " + summary)
    advice = fan_out_advice(request_threads, intra_op, cores, libraries) + list(settings.advice)
    # The first advice as a knob and its value, for scripts that apply it (benchmarks/advice_gain.py).
    if intra_op and request_threads:
        knob = next((k for name, _, k in LIBRARIES if name in libraries), "OMP_NUM_THREADS")
        fix = Fix(knob, max(1, int(cores) // max(1, request_threads)))
    else:
        fix = Fix("request_threads", max(1, int(cores)))
    evidence = SchedulerEvidence(
        runqueue_wait_per_cpu_second=ratio, runqueue_wait_s=os_.runqueue_wait_s, cpu_s=os_.cpu_s,
        mean_runnable_threads=os_.mean_runnable, usable_cores=cores, affinity_cores=os_.cores,
        cgroup_cpu_quota_cores=os_.cpu_quota_cores, runnable_per_core=oversubscription,
        threads=os_.threads_max, request_threads=request_threads, intra_op_threads=intra_op,
        intra_op_libraries=", ".join(libraries) or None, native_mutex_wait_share=native_mutex_share,
        threads_per_core=os_.threads_max / cores if cores else None,
        involuntary_ctx_per_s=os_.involuntary_ctx_per_s, voluntary_ctx_per_s=os_.voluntary_ctx_per_s, fix=fix)
    if native_mutex_share >= settings.native_mutex_low and libraries:
        gain = serial_gain(native_mutex_share, analysis, "queueing on the library's mutex")
    else:
        # Fewer threads do not make a core faster: what returns is the switching itself, and
        # only the preemptions (involuntary switches) are the threads outnumbering the cores. A
        # voluntary switch is a thread blocking (a GIL handoff, a lock, IO): fewer threads leave
        # that wait where it is. Counted in, 8 threads sharing one SQLite connection on CPython
        # 3.13 (~30,000 switches/s, most of them GIL handoffs) read a 1.97x gain here, above the
        # GIL convoy's own, and led with "cut the request threads".
        switches = os_.involuntary_ctx_per_s or 0.0
        saved = min(0.5, switches * CONTEXT_SWITCH_COST_S / cores) if cores else 0.0
        gain = (1.0 / (1.0 - saved), f"estimate: {switches:.0f} preemptions/s (involuntary context "
                f"switches) at about {CONTEXT_SWITCH_COST_S * 1e6:.0f} us each (cache refills included) "
                f"on {cores:g} cores: {100 * saved:.1f}% of the CPU returned")
    split = next((sp for sp in analysis.pool_splits if sp.enough), None)
    room = core_room(analysis)
    # The caller's samples alone cannot tell a pool computing (the caller waits in inner_thread
    # for busy pool threads) from a pool handing work out and waiting on itself; the cores can:
    # a pool that parallelizes keeps them busy, one that synchronises leaves them idle.
    if (split is not None and split.sync_share_low >= settings.pool_sync_low
            and room is not None and room >= settings.pool_idle_core_room):
        sync_score = ramp(split.sync_share_low, settings.pool_sync_low, settings.pool_sync_high)
        if sync_score >= score:
            return _intra_op_overhead(analysis, settings, split, sync_score, intra_op, cores,
                                      evidence, sites)
    return make_finding(ID, settings, score, summary, evidence, sites, advice=advice, gain=gain,
                        samples=req["count"].sum())


CONTEXT_SWITCH_COST_S = 20e-6
_KNOB_ADVICE = {
    "OPENBLAS_NUM_THREADS": "start the service with OPENBLAS_NUM_THREADS={n} (or threadpoolctl's "
                            "threadpool_limits({n}, user_api='blas') at start-up)",
    "MKL_NUM_THREADS": "start the service with MKL_NUM_THREADS={n} (or mkl.set_num_threads({n}))",
    "OMP_NUM_THREADS": "start the service with OMP_NUM_THREADS={n}",
    "torch.set_num_threads": "call torch.set_num_threads({n}) at start-up (and OMP_NUM_THREADS={n})",
    "intra_op_num_threads": "create the session with SessionOptions().intra_op_num_threads = {n}",
}


def _intra_op_overhead(analysis: Analysis, settings: Settings, split: PoolSplit, score: float,
                       intra_op: int, cores: float, evidence: SchedulerEvidence,
                       sites: list[Site]) -> Finding:
    """The intra-op pool costs more than it parallelizes: its synchronisation rivals its kernels."""
    pool = intra_op + 1 if intra_op else int(cores or 1)
    value = max(1, int(pool * (1.0 - split.sync_share)))
    sync_names = ", ".join(list(split.sync_functions)[:3]) or "pool synchronisation"
    kernel_names = ", ".join(list(split.kernel_functions)[:2]) or "kernels"
    room = core_room(analysis)
    # The pool's knob replaces the thread count's as the fix (the key keeps its place).
    evidence = replace(evidence, intra_op_library=split.library, intra_op_sync_share=split.sync_share,
                       intra_op_sync_share_95_low=round(split.sync_share_low, 4),
                       cores_in_use=round(cores / room, 3) if room else None,
                       intra_op_sync_samples=split.sync_samples, intra_op_kernel_samples=split.kernel_samples,
                       native_samples_used=split.samples, intra_op_sync_functions=split.sync_functions,
                       intra_op_kernel_functions=split.kernel_functions, knob=split.knob,
                       knob_value=value, fix=Fix(split.knob, value))
    summary = (f"{split.library}'s thread pool spends {100 * split.sync_share:.0f}% of its native "
               f"samples synchronising ({sync_names}) against {100 * (1 - split.sync_share):.0f}% in "
               f"kernels ({kernel_names}), over {split.samples} native samples: its time goes to "
               f"handing work out and waiting, not to compute")
    knob = _KNOB_ADVICE.get(split.knob, split.knob + "={n}").format(n=value)
    advice = [f"Set {split.library}'s pool to {value} thread{'s' if value > 1 else ''}: {knob}. "
              f"Its {pool}-thread pool hands work out and waits for it more than it computes.",
              "Then re-measure: with the pool small, request threads (or a batcher feeding bigger "
              "matrices) supply the parallelism."]
    sure = split.sync_share_low
    gain = amdahl(sure)
    basis = (f"estimate: {100 * split.sync_share:.0f}% of the library's {split.samples} native samples "
             f"synchronise (at least {100 * sure:.0f}% at 95% confidence); without that each call "
             f"takes at most {100 * (1 - sure):.0f}% of its time: about {gain:.2f}x")
    variant = replace(settings, title=settings.intra_op_title)
    return make_finding(ID, variant, score, summary, evidence, sites, advice=advice,
                        gain=(gain, basis), samples=split.samples,
                        share_samples={"native_mutex_wait_share": analysis.request_samples()["count"].sum()})


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.SCHEDSTAT,), uses=(Input.NATIVE_FRAMES,))
