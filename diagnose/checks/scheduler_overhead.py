"""scheduler_overhead: more runnable threads than cores; threads wait for a CPU."""

from __future__ import annotations

from diagnose.checks.base import NotApplicable, make_finding, ramp, top_sites

ID = "scheduler_overhead"


def run(analysis, settings):
    os_ = analysis.os
    if os_ is None or os_.runqueue_ratio is None:
        return NotApplicable(ID, "needs per-thread OS counters (schedstat), only taken by `attach`")
    cores = os_.usable_cores
    ratio = os_.runqueue_ratio
    oversubscription = os_.mean_runnable / cores if cores else 0.0
    # Both must hold: more runnable threads than cores, and threads waiting for a core a long
    # time per second they run. Run-queue wait alone misleads: the sampler itself takes a core.
    score = min(ramp(oversubscription, settings["oversubscription_low"], settings["oversubscription_high"]),
                ramp(ratio, settings["low"], settings["high"]))
    req = analysis.request_samples()
    busy = req[req["state"].isin(("python", "native", "gil"))]
    sites = top_sites(analysis, busy, float(busy["count"].sum()) or 1.0, limit=3)
    evidence = {
        "runqueue_wait_per_cpu_second": ratio,
        "runqueue_wait_s": os_.runqueue_wait_s,
        "cpu_s": os_.cpu_s,
        "mean_runnable_threads": os_.mean_runnable,
        "usable_cores": cores,
        "runnable_per_core": oversubscription,
        "threads": os_.threads_max,
        "threads_per_core": os_.threads_max / cores if cores else None,
        "involuntary_ctx_per_s": os_.involuntary_ctx_per_s,
        "voluntary_ctx_per_s": os_.voluntary_ctx_per_s,
    }
    summary = (f"{os_.mean_runnable:.1f} runnable threads on {cores:g} usable cores; threads waited "
               f"{ratio:.2f} s for a core per CPU-second ({os_.threads_max} threads in all)")
    return make_finding(ID, settings, score, summary, evidence, sites)
