"""underloaded: the workers mostly wait for requests; the bottleneck is outside the process."""

from __future__ import annotations

from diagnose.checks.base import NotApplicable, make_finding, pct, ramp, top_sites

ID = "underloaded"


def run(analysis, settings):
    workers = analysis.threads[analysis.threads["role"].isin(("request", "idle"))]
    if workers.empty:
        return NotApplicable(ID, "no worker threads were seen")
    samples = analysis.samples[analysis.samples["thread"].isin(workers.index)]
    total = float(samples["count"].sum())
    idle = samples[samples["state"] == "idle"]
    share = float(idle["count"].sum()) / total if total else 0.0
    structure = analysis.structure
    stages = [st for st in structure.stages if st.role in ("stage", "batcher")]
    if structure.pipeline and stages:
        # A pipeline is underloaded only when every stage waits for input: a stage blocked on
        # put, or busy, is waiting for (or is) the bottleneck, not for requests.
        share = min(st.starved_share for st in stages)
    score = ramp(share, settings["low"], settings["high"])
    utilization = analysis.os.cpu_utilization if analysis.os is not None else None
    if utilization is not None:
        # Busy cores contradict "waiting for work", whatever the thread states say.
        score *= max(0.0, 1.0 - max(0.0, utilization - 0.5) / 0.4)
    evidence = {
        "idle_share_of_workers": share,
        "worker_threads": int(len(workers)),
        "idle_threads": int((workers["role"] == "idle").sum()),
        "cpu_utilization": utilization,
    }
    sites = top_sites(analysis, idle, total, limit=3)
    summary = f"worker threads were idle waiting for work {pct(share)} of the time"
    if utilization is not None:
        summary += f"; cores {pct(min(utilization, 1.0))} busy"
    return make_finding(ID, settings, score, summary, evidence, sites,
                        gain=(1.0, "estimate: nothing inside the process limits throughput"),
                        samples=total)
