"""preprocess_bound: request-thread busy time is dominated by preprocessing.

What it finds:
    The share of the request threads' busy samples spent in preprocessing (decode, resize,
    normalize, tokenize), discounted when the request threads are busy less than half the time:
    threads that mostly wait (on a lock, a pool, a native library's mutex) have another
    bottleneck, whatever their few busy samples run.

Why it matters:
    Preprocessing, not the model, limits throughput: more model threads or a faster model will
    not help. Making preprocessing free buys at most 1/(1 - share) (Amdahl).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pandas as pd

from diagnose.checks.pipeline_gain import bound_by_bottleneck
from diagnose.checks.spec import CheckSettings, CheckSpec, Input
from diagnose.checks.spec import Unit as U
from diagnose.checks.declare import declarations, key, shared_key
from diagnose.checks.measurements import Measurements, Omitted
from diagnose.report.model.findings import Fix
from diagnose.checks.base import (Finding, Lever, LeverKind, ScoreBasis, amdahl, busy_samples, core_room,
                                  make_finding, more_cores_lever, pct, ramp, remove_work_lever,
                                  top_sites)

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.report.model.sections import Stage

ID = "preprocess_bound"
PHASE = "preprocess"  # the request phase it measures (classify/categories.PHASES)


@dataclass(frozen=True)
class Settings(CheckSettings):
    title: str = "Preprocessing dominates request time"
    what: str = ("Share of request threads' busy samples spent in preprocessing (decode, resize, normalize, "
                 "tokenize), discounted when the request threads are busy less than half the time.")
    advice: tuple[str, ...] = (
        "Preprocessing, not the model, limits throughput: more model threads or a faster model will not help.",
        # the change the ranked (calibrated) gain measures, first: cheaper preprocessing
        ("Use native, GIL-releasing implementations (Pillow-SIMD, OpenCV, torchvision.io, fast tokenizers) and "
         "avoid per-pixel Python loops."),
        ("Move decode/resize/normalize out of the request thread into a pipeline stage with its own 2-3 threads (or "
         "processes, if it is pure Python and holds the GIL), and balance stages by their measured time."),
        "Cache or precompute features that repeat across requests.",
    )
    low: float = 0.25
    high: float = 0.65
    min_busy_share: float = 0.5


@dataclass(frozen=True, kw_only=True)
class PreprocessEvidence(Measurements):
    preprocess_share_of_busy: float = key("share of busy time in preprocessing", U.PERCENT)
    busy_share_of_request_time: float = shared_key()
    model_share_of_busy: float = shared_key()
    postprocess_share_of_busy: float = key("share of busy time in postprocessing", U.PERCENT)
    busy_samples: int = shared_key()
    fix: Fix | Omitted = shared_key(optional=True)


EVIDENCE = declarations(PreprocessEvidence)


def run(analysis: Analysis, settings: Settings) -> Finding:
    """Preprocessing's share of the request threads' busy time; its gain the better of half its cost and idle cores."""
    req = analysis.request_samples()
    busy = busy_samples(req)
    total_busy = float(busy["count"].sum())
    by_phase = busy.groupby("phase", observed=False)["count"].sum() / total_busy
    share = float(by_phase.get(PHASE, 0.0))
    pre = busy[busy["phase"] == PHASE]
    sites = top_sites(analysis, pre, total_busy)
    # Preprocessing can only dominate the service if the request threads are mostly busy:
    # threads that mostly wait (on a lock, a pool, a native library's mutex) have another
    # bottleneck, whatever their few busy samples run.
    busy_share = total_busy / float(req["count"].sum())
    busy_factor = min(1.0, busy_share / settings.min_busy_share)
    score = ramp(share, settings.low, settings.high) * busy_factor
    evidence = PreprocessEvidence(preprocess_share_of_busy=share, busy_share_of_request_time=busy_share,
                                  model_share_of_busy=float(by_phase.get("model", 0.0)),
                                  postprocess_share_of_busy=float(by_phase.get("postprocess", 0.0)),
                                  busy_samples=int(total_busy))
    where = f", most in {sites[0].function}" if sites else ""
    if sites:
        evidence = replace(evidence, fix=Fix("faster_preprocessing", sites[0].function))
    summary = f"{pct(share)} of request-thread busy time is preprocessing{where}"
    half = halved_gain(share)
    bound = amdahl(share)
    half_basis = (f"calibrated: preprocessing is {pct(share)} of busy request time; halving its "
                  f"cost buys {half:.2f}x (Amdahl; {CALIBRATION})")
    # The first change it advises makes preprocessing cheaper (a native decode, a draft-mode decode): a fix
    # removes part of the work, not all of it, so its figure is the calibrated half; the Amdahl
    # bound of free preprocessing follows as a lever (an upper bound, never the ranked figure).
    free = remove_work_lever(share, "preprocessing", "busy request time")
    levers = [Lever(LeverKind.REMOVE_WORK, round(half, 2), "if preprocessing cost half",
                    half_basis), free]
    # The third advice moves preprocessing into a stage of its own threads or processes: the
    # cores the process leaves idle, if any, are what that buys (on saturated cores, nothing:
    # so it comes after the cheaper preprocessing the ranked gain measures).
    room = core_room(analysis)
    os_ = analysis.os
    own_stage = _own_stage(analysis, pre)
    # what the idle cores allow, where the OS counters measured a room; preprocessing that
    # already runs in a pipeline stage of its own has had that advice: its threads more
    # threads of that stage, which stage_bound weighs, not this lever
    room_for = (room if room is not None and room > 1.0 and os_ is not None and own_stage is None
                else 1.0)

    # Moved to the idle cores, preprocessing buys no more than it would made free.
    def spread_gain(s: float) -> float:
        return min(room_for, amdahl(s))

    spread = spread_gain(share)
    if room_for > 1.0 and os_ is not None:
        used = os_.cpu_s / os_.window_s
        # the machine's idle cores bound the room too: say them, or 0.65 of 2 cores reads as
        # room for 3x where the other workers hold the rest
        idle = (f", {os_.machine_idle_cores:.2f} idle on the machine"
                if os_.machine_idle_cores is not None else "")
        levers.append(more_cores_lever(spread, f"estimate: the process uses {used:.2f} of "
                                               f"{os_.usable_cores:g} usable cores{idle}; "
                                               f"preprocessing spread over the idle ones buys at "
                                               f"most {spread:.2f}x"))
    # The ranked figure: the better of the two realistic levers (not the upper bound).
    gain = max(half, spread)
    basis = (half_basis if half >= spread else
             f"estimate: preprocessing in a stage of its own over the idle cores buys {spread:.2f}x"
             f" (more than halving its cost, {half:.2f}x, calibrated)")
    if own_stage is not None:
        basis += (f"; it already runs in a stage of its own ({own_stage}), so spreading it over "
                  f"more threads is that stage's lever, not this one's")
    basis += f"; making it free, at most {bound:.2f}x (an upper bound)"
    found = make_finding(ID, settings, score, summary, evidence, sites, gain=(gain, basis),
                        advice=_advice(settings, share, float(by_phase.get("model", 0.0)), half,
                                       sites[0].function if sites else None) if score > 0 else None,
                        samples=total_busy, levers=levers,
                        share_samples={"busy_share_of_request_time": req["count"].sum()},
                        basis=ScoreBasis("preprocess_share_of_busy",
                                         lambda s: ramp(s, settings.low, settings.high) * busy_factor,
                                         lambda s: max(halved_gain(s), spread_gain(s))))
    found = bound_by_bottleneck(found, analysis, _stage_phase_share,
                                lambda s: max(halved_gain(s), spread_gain(s)), "preprocessing")
    return replace(found, acts_on=PHASE)  # its advice makes the preprocessing phase cheaper


# A stage is preprocessing's own when it runs most of the preprocessing and mostly preprocessing.
OWN_STAGE_SHARE = 0.5


def _own_stage(analysis: Analysis, pre: pd.DataFrame) -> str | None:
    """The pipeline stage whose threads run most of the preprocessing and run mostly that:
    preprocessing already moved out of the request path into threads of its own (a decode
    stage); None outside a pipeline or where no stage is such."""
    structure = analysis.structure
    total = float(pre["count"].sum())
    if not structure.pipeline or not total:
        return None
    for stage in structure.stages:
        threads = analysis.stage_threads(stage)
        if not threads:
            continue
        mine = float(pre.loc[pre["thread"].isin(threads), "count"].sum())
        phase = _stage_phase_share(stage, analysis.samples[analysis.samples["thread"].isin(threads)])
        if mine / total >= OWN_STAGE_SHARE and phase is not None and phase[0] >= OWN_STAGE_SHARE:
            return stage.name
    return None


def _stage_phase_share(_stage: Stage, rows: pd.DataFrame) -> tuple[float, int] | None:
    """The share of a stage's busy samples in preprocessing, and how many busy samples."""
    busy = busy_samples(rows)
    total = float(busy["count"].sum())
    if not total:
        return 0.0, 0  # a stage never busy runs no preprocessing
    return float(busy.loc[busy["phase"] == PHASE, "count"].sum()) / total, int(total)


# The measured fixes behind the calibration (benchmarks/README.md, "Calibration"): each removed
# part of the preprocessing, and bought close to what halving it predicts.
# The half was chosen on these two fixes: they are its fit, not evidence that it holds.
CALIBRATION = ("calibrated on 2 fixes: a cheaper decode 1.45x where halving predicted 1.84x, a "
               "draft-mode JPEG decode 1.76x where it predicted 1.87x; not yet checked on a "
               "workload it was not fitted on")


def _advice(settings: Settings, share: float, model_share: float, half: float,
            hottest: str | None) -> list[str]:
    """The declared advice (for a finding that shows anything); its first line says
    preprocessing alone limits throughput, which a model taking more of the busy time denies
    (forked_workers: 31% against 71%, where a faster model pays more than cheaper
    preprocessing)."""
    if model_share <= share or not settings.advice:
        return list(settings.advice)
    at = f" (most in {hottest})" if hottest else ""
    first = (f"Make preprocessing cheaper{at}: it is {pct(share)} of the request threads' busy "
             f"time, and halving it buys {half:.2f}x; it is not the only limit: the model takes "
             f"{pct(model_share)}, so a cheaper model pays too.")
    return [first, *settings.advice[1:]]


def halved_gain(share: float) -> float:
    """Amdahl for preprocessing made half as costly: the calibrated gain of a realistic fix."""
    return 1.0 / (1.0 - min(1.0, max(0.0, share)) / 2.0)


SPEC = CheckSpec(ID, Settings, EVIDENCE, __doc__ or "", run=run,
                 needs=(Input.BUSY_REQUEST_SAMPLES,), uses=())
