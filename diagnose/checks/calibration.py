"""How each check's predicted gain has fared against measurement: fixes applied to real
workloads, the check's figure beside the gain measured by paired runs (benchmarks/calibration.py
and the services in benchmarks/services/; the table is benchmarks/README.md, "Calibration").

The engine (checks/engine.py) gives each finding whose check has a record here the words
`fared_words` makes, so a report states beside the gain how such predictions have done. The
records are measured figures, copied from the benchmark's output: a new measurement is added
here and to the README's table together.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class MeasuredFix:
    """One fix applied: where, what, the check's ranked figure before it, and the measured gain
    (throughput after / before, median of paired runs)."""

    workload: str
    fix: str
    predicted: float
    measured: float

    @property
    def ratio(self) -> float:
        return self.measured / self.predicted


# Per check, the fixes of its first advice (the lever its ranked gain predicts).
RECORD: dict[str, tuple[MeasuredFix, ...]] = {
    "preprocess_bound": (
        MeasuredFix("the preprocess_bound fixture", "a cheaper decode", 1.84, 1.45),
        MeasuredFix("an image service", "a draft-mode JPEG decode", 1.87, 1.76),
    ),
    "gil_contention": (
        # the vectorised figure (checks/vectorise_gain.py); the waits' figure it replaced had
        # predicted 1.92x for the fixture's 29.23x
        MeasuredFix("the gil_contention fixture", "the holder's loop vectorised", 20.00, 22.65),
        MeasuredFix("the gil_contention fixture", "the holder's loop vectorised", 20.00, 19.67),
        # medians of 3 rounds (benchmarks/services/calibrate_service.py --service text_features)
        MeasuredFix("a text service (trigram counting)", "the holder's loop vectorised", 3.15, 4.17),
        MeasuredFix("a text service (trigram counting)", "the holder's loop vectorised", 3.06, 3.92),
    ),
    "lock_contention": (
        MeasuredFix("the lock_contention fixture", "one model instance per core", 1.88, 1.76),
        MeasuredFix("the locked_blas fixture", "OPENBLAS_NUM_THREADS=1", 1.48, 1.39),
        MeasuredFix("the lock_across_io fixture", "the fetch moved out of the lock", 6.05, 6.03),
        # the locked model: medians of 3-4 rounds, each one attach and one paired run
        # (benchmarks/services/calibrate_service.py)
        MeasuredFix("a locked model (CPython 3.11)", "OPENBLAS_NUM_THREADS=1", 1.48, 1.40),
        MeasuredFix("a locked model (CPython 3.12)", "OPENBLAS_NUM_THREADS=1", 1.43, 1.35),
        MeasuredFix("a locked model (CPython 3.13)", "OPENBLAS_NUM_THREADS=1", 1.36, 1.45),
    ),
    "logging_lock": (
        # at the Amdahl cap, a lower bound; the fix dropped 97% of the records (its sink was at
        # capacity), which is how it bought more
        MeasuredFix("the logging_lock fixture", "a QueueHandler", 20.00, 41.89),
        MeasuredFix("the logging_lock fixture", "a QueueHandler", 20.00, 44.85),
    ),
    "pool_wait": (
        MeasuredFix("the pool_wait fixture", "a pool of 9", 3.81, 4.01),
    ),
    "stage_bound": (
        MeasuredFix("the pipeline fixture", "two model threads", 1.62, 1.42),
        MeasuredFix("the batching fixture", "two batchers", 1.00, 1.07),
    ),
    "scheduler_overhead": (
        MeasuredFix("the blas_fanout fixture", "one BLAS thread", 1.30, 1.72),
        MeasuredFix("the scheduler_overhead fixture", "two request threads", 1.01, 0.97),
        MeasuredFix("the cpu_quota fixture", "one request thread", 1.11, 1.24),
        MeasuredFix("an image service", "two request threads", 1.05, 0.87),
    ),
    "cpu_throttled": (
        MeasuredFix("the cpu_quota fixture", "a quota of 2 cores", 3.34, 4.22),
    ),
}


# More fixes than this are summed up by their median; the README's table lists them.
LISTED_FIXES = 2


def fared_words(check_id: str) -> str | None:
    """"such predictions measured 0.79-0.94x of their figure over 2 measured fixes (...)": each
    fix named when they are few, else their median; None when no fix of the check's advice was
    measured."""
    fixes = RECORD.get(check_id)
    if not fixes:
        return None
    ratios = sorted(f.ratio for f in fixes)
    span = f"{ratios[0]:.2f}x" if len(ratios) == 1 else f"{ratios[0]:.2f}-{ratios[-1]:.2f}x"
    if len(fixes) <= LISTED_FIXES:
        which = "; ".join(f"{f.fix} on {f.workload}: {f.predicted:.2f}x predicted, {f.measured:.2f}x measured"
                          for f in fixes)
    else:
        which = (f"median {statistics.median(ratios):.2f}x; on "
                 + ", ".join(dict.fromkeys(f.workload for f in fixes))
                 + "; benchmarks/README.md, Calibration")
    count = f"{len(fixes)} measured fix" + ("es" if len(fixes) > 1 else "")
    return f"such predictions measured {span} of their figure over {count} ({which})"


def fix_words(check_id: str, fix: str) -> str | None:
    """"N measured fixes: A-Bx of their figure" over the record's fixes of `check_id` that
    applied `fix`; None when none did. For a gain basis that names the fix it calibrates."""
    ratios = sorted(f.ratio for f in RECORD.get(check_id, ()) if f.fix == fix)
    if not ratios:
        return None
    span = f"{ratios[0]:.2f}x" if len(ratios) == 1 else f"{ratios[0]:.2f}-{ratios[-1]:.2f}x"
    return f"{len(ratios)} measured fix{'es' if len(ratios) > 1 else ''}: {span} of their figure"
