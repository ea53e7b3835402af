"""unbounded_backlog: memory grows steadily while request threads are saturated.

What it finds:
    Resident memory growth per second (a linear fit over the window, scored by its steadiness)
    while the workers are saturated, and where work is queued: executor submits and queue puts.
    Steady is a straight line, or, on a loaded machine where the process gets a core in bursts,
    steps that never fall and come in many rises (model/os_summary.RssSteps).

Why it matters:
    Work is accepted faster than it is served and waits in a queue with no bound: memory grows
    until the process is killed, and every queued request times out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from diagnose.checks.spec import NOT_MEASURED, CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements
from diagnose.report.model.findings import Fix
from diagnose.checks.base import Finding, Site, make_finding, pct, ramp
from diagnose.model.os_summary import ProcessOS, RssSteps
from diagnose.samples.profile import Frame
from diagnose.vocab import HANDLER_ROLES, ThreadState

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis

ID = "unbounded_backlog"


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "An unbounded queue is filling up"
    what: str = "Resident memory growth per second (linear fit over the window) while the workers are saturated."
    advice: tuple[str, ...] = (
        ("Work is accepted faster than it is served and waits in a queue with no bound: memory grows until the "
         "process is killed, and every queued request times out."),
        ("Bound the queue (e.g. a ThreadPoolExecutor behind a BoundedSemaphore, or queue.Queue(maxsize=N)) and "
         "reject explicitly when full (HTTP 429/503 'busy'): overload must be a fast error, not an avalanche."),
        "Then raise capacity where the profile shows the workers spend their time.",
    )
    low: float = 0.5
    high: float = 5.0
    min_r2: float = 0.8
    full_r2: float = 0.95
    min_busy: float = 0.6
    # Growth in steps (RssSteps): fully steady when at most this share of the memory's movement
    # fell, not at all from the next; and when its largest rise is at most this share of the
    # growth (five steps or more), not at all from the next (three steps or fewer).
    steps_fall_full: float = 0.02
    steps_fall_none: float = 0.1
    steps_rise_full: float = 0.2
    steps_rise_none: float = 0.35


@dataclass(frozen=True, kw_only=True)
class BacklogEvidence(Measurements):
    rss_growth_mb_per_s: float = key("resident memory growth", U.MB_PER_S)
    rss_growth_mb: float = key("resident memory change over the window", U.MB)
    rss_fit_r2: float | None = key(
        "steadiness of the growth (r² of a straight-line fit)", U.NUMBER, none=NOT_MEASURED)
    rss_end_mb: float = key("resident memory at the end", U.MB)
    rss_fall_fraction: float | None = key(
        "share of the memory's movement that fell", U.PERCENT, none=NOT_MEASURED)
    rss_largest_rise_fraction: float | None = key(
        "largest single rise, of the growth", U.PERCENT, none=NOT_MEASURED)
    worker_busy_share: float = shared_key()
    submit_site_seen: bool = key("a submit / put call site was sampled", U.FLAG)
    fix: Fix = shared_key()


EVIDENCE = declarations(BacklogEvidence)
MB = 1024 * 1024
# Where work is queued without a bound: executor submits and queue puts.
_SUBMIT = (("concurrent/futures/thread.py", "submit"), ("queue.py", "put"))


def _worker_sites(analysis: Analysis, limit: int = 3) -> list[Site]:
    """The functions the pool workers run (the frame under the executor's work item): what the
    backlog is waiting for."""
    counts: dict[Frame, int] = {}
    workers = analysis.samples[analysis.samples["thread"].isin(analysis.request_threads.index)]
    for sid, count in workers.groupby("stack")["count"].sum().items():
        frames = [analysis.frame(f) for f in analysis.profile.stacks[int(sid)]]
        run = next((i for i, f in enumerate(frames) if f.file.endswith("concurrent/futures/thread.py")
                    and f.function.rsplit(".", 1)[-1] == "run"), None)
        if run is None:
            continue
        target = next((f for f in frames[run + 1:] if not f.native), None)
        if target is not None:
            counts[target] = counts.get(target, 0) + int(count)
    total = float(workers["count"].sum()) or 1.0
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return [Site(f.function, f.file, f.line, round(c / total, 4)) for f, c in ranked]


def _submit_sites(analysis: Analysis, limit: int = 3) -> list[Site]:
    """The frames that call submit()/put(): where the backlog is fed. A submit is over in
    microseconds, so a short window may not catch one."""
    counts: dict[Frame, int] = {}
    for sid, count in analysis.samples.groupby("stack")["count"].sum().items():
        frames = [analysis.frame(f) for f in analysis.profile.stacks[int(sid)]]
        for i, f in enumerate(frames):
            if any(f.file.endswith(path) and f.function.rsplit(".", 1)[-1] == name
                   for path, name in _SUBMIT):
                caller = next((c for c in reversed(frames[:i]) if not c.native), None)
                if caller is not None:
                    counts[caller] = counts.get(caller, 0) + int(count)
                break
    total = float(analysis.samples["count"].sum()) or 1.0
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return [Site(f.function, f.file, f.line, round(c / total, 4)) for f, c in ranked]


def _in_steps(steps: RssSteps | None, settings: Settings) -> float:
    """How steady growth in steps is, 0-1: it never falls (churn falls about as often as it
    rises: 40-50% of its movement measured) and comes in many rises (a one-off allocation is one)."""
    if steps is None:
        return 0.0
    never_falls = 1.0 - ramp(steps.fall_fraction, settings.steps_fall_full, settings.steps_fall_none) / 100
    many_rises = 1.0 - ramp(steps.largest_rise_fraction, settings.steps_rise_full, settings.steps_rise_none) / 100
    return never_falls * many_rises


def _steadiness_words(os_: ProcessOS, by_fit: float, by_steps: float) -> str:
    fit = f"r²={os_.rss_fit_r2 or 0:.2f}"
    if by_steps <= by_fit or os_.rss_steps is None:
        return f"steady: {fit}"
    # the process ran in bursts: say why a loose line is still a backlog
    steps = os_.rss_steps
    return (f"in steps: {pct(steps.fall_fraction)} of its movement fell and its largest rise was "
            f"{pct(min(1.0, steps.largest_rise_fraction))} of the growth, though a straight line "
            f"fits it loosely, {fit}")


def run(analysis: Analysis, settings: Settings) -> Finding:
    os_ = analysis.os
    # needs RSS_SERIES: the engine runs this check only with the counters' memory series
    assert os_ is not None and os_.rss_slope_bytes_per_s is not None
    workers = analysis.threads[analysis.threads["role"].isin(HANDLER_ROLES)]
    samples = analysis.samples[analysis.samples["thread"].isin(workers.index)]
    total = float(samples["count"].sum())
    busy = float(samples[samples["state"] != ThreadState.IDLE]["count"].sum()) / total if total else 0.0
    slope_mb = os_.rss_slope_bytes_per_s / MB
    # A backlog grows in a straight line (r² 0.99+ measured); allocator churn of a busy process
    # wanders by 3-7 MB (residual sd) and, in a 3 s window, reaches r² 0.7-0.87 by chance.
    by_fit = ramp(os_.rss_fit_r2 or 0.0, settings.min_r2, settings.full_r2) / 100
    # A backlog whose process gets a core in bursts (a loaded machine) rises in steps: the
    # fixture on CPython 3.13 beside a 64-thread neighbour ran 0.12 s of a 4 s window, and its
    # 43 MB came in 8 rises a line fitted at r² 0.79.
    by_steps = _in_steps(os_.rss_steps, settings) if slope_mb > settings.low else 0.0
    steadiness = max(by_fit, by_steps)
    saturation = min(1.0, busy / settings.min_busy)
    score = ramp(slope_mb, settings.low, settings.high) * steadiness * saturation
    grown = ((os_.rss_end or 0) - (os_.rss_start or 0)) / MB
    steps = os_.rss_steps
    summary = (f"resident memory grew {slope_mb:.1f} MB/s ({grown:.0f} MB over the window, "
               f"{_steadiness_words(os_, by_fit, by_steps)}) while workers were busy {pct(busy)} "
               f"of the time")
    submit_sites = _submit_sites(analysis)
    evidence = BacklogEvidence(
        rss_growth_mb_per_s=slope_mb, rss_growth_mb=grown, rss_fit_r2=os_.rss_fit_r2,
        rss_end_mb=(os_.rss_end or 0) / MB, rss_fall_fraction=steps.fall_fraction if steps else None,
        rss_largest_rise_fraction=min(1.0, steps.largest_rise_fraction) if steps else None,
        worker_busy_share=busy, submit_site_seen=bool(submit_sites),
        fix=Fix("max_queue", max(1, 2 * int(len(analysis.request_threads)))))
    return make_finding(ID, settings, score, summary, evidence,
                        submit_sites + _worker_sites(analysis),
                        gain=(1.0, "estimate: a bound buys stability (fast rejections instead of "
                                   "time-outs and an out-of-memory kill), not throughput"),
                        samples=total)


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.RSS_SERIES,), uses=())
