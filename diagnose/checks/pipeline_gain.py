"""What a finding's advice buys in a pipeline: its bottleneck stage's gain, no more.

A pipeline's throughput is its bottleneck stage's (the utilization law): work or waits of threads
in another stage (request threads waiting on a batcher and re-taking the GIL on the way back, a
decode stage beside a slow model stage) buy throughput only as far as the same change speeds the
bottleneck stage. So a finding measured over the request threads keeps its score (its own
evidence), and its predicted gain is bounded by what its own formula gives on the share the
bottleneck stage's threads show; the bound is taken at both ends of that share's interval, so the
ranking (checks/arbiter.py) sees how sure it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from diagnose.checks.base import Finding, pct
from diagnose.model.confidence import wilson

if TYPE_CHECKING:  # types only: the checks read an Analysis, never build one
    from diagnose.model.analysis import Analysis
    from diagnose.report.model.sections import Stage

# A share of the bottleneck stage's samples, and how many samples that share's interval rests on;
# None when the stage's samples do not measure it.
ShareOf = Callable[["Stage", pd.DataFrame], "tuple[float, int] | None"]


def bottleneck(analysis: Analysis) -> tuple[Stage, pd.DataFrame] | None:
    """The pipeline's bottleneck stage and its threads' samples; None outside a pipeline."""
    structure = analysis.structure
    if not structure.pipeline or not structure.bottleneck:
        return None
    stage = structure.stage(structure.bottleneck)
    if stage is None:
        return None
    threads = analysis.stage_threads(stage)
    if not threads:
        return None
    return stage, analysis.samples[analysis.samples["thread"].isin(threads)]


def bound_by_bottleneck(found: Finding, analysis: Analysis, share_of: ShareOf,
                        gain_of: Callable[[float], float], what: str) -> Finding:
    """`found` with its predicted gain (and its interval) no larger than `gain_of` at the share
    of `what` that `share_of` measures on the bottleneck stage's samples."""
    if found.predicted_gain is None:
        return found
    at = bottleneck(analysis)
    if at is None:
        return found
    stage, rows = at
    measured = share_of(stage, rows)
    if measured is None:
        return found
    share, samples = measured
    low, high = wilson(share, samples) if samples else (share, share)
    cap, cap_low, cap_high = (round(float(gain_of(s)), 2) for s in (share, low, high))
    point = found.predicted_gain
    gain_low, gain_high = found.gain_range
    bounded = min(point, cap)
    interval = (min(gain_low, cap_low, bounded), max(min(gain_high, cap_high), bounded))
    if bounded == point and interval == (gain_low, gain_high):
        return found  # the bottleneck stage gains at least as much: no bound
    basis = (f"{found.gain_basis}; bounded by the bottleneck stage {stage.name}, which sets the "
             f"pipeline's throughput: {what} is {pct(share)} of its time, so at most {cap:.2f}x")
    return replace(found, predicted_gain=bounded, gain_interval=interval, gain_basis=basis,
                   bounded_by_stage=stage.name if bounded < point else None)
