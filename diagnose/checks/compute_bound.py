"""compute_bound: the cores are busy and the busy time is model compute."""

from __future__ import annotations

from diagnose.checks.base import NotApplicable, make_finding, pct, ramp, top_sites

ID = "compute_bound"
BUSY = ("python", "native", "gil")


def run(analysis, settings):
    req = analysis.request_samples()
    total = float(req["count"].sum())
    busy = req[req["state"].isin(BUSY)]
    total_busy = float(busy["count"].sum())
    if total_busy == 0:
        return NotApplicable(ID, "request threads were never busy")
    model = busy[busy["phase"] == "model"]
    share = float(model["count"].sum()) / total_busy
    if analysis.os is not None:
        utilization = analysis.os.cpu_utilization
        utilization_source = "os"
    else:
        # Offline: the share of request-thread samples that were busy stands in for utilization.
        utilization = total_busy / total
        utilization_source = "samples"
    busy_factor = min(1.0, utilization / settings["min_utilization"])
    score = ramp(share, settings["low"], settings["high"]) * busy_factor
    evidence = {
        "model_share_of_busy": share,
        "cpu_utilization": utilization,
        "utilization_source": utilization_source,
        "busy_samples": int(total_busy),
    }
    sites = top_sites(analysis, model, total_busy)
    summary = (f"cores {pct(min(utilization, 1.0))} busy; {pct(share)} of request-thread busy time "
               f"is model compute" + (f", most in {sites[0].function}" if sites else ""))
    return make_finding(ID, settings, score, summary, evidence, sites)
