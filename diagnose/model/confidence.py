"""How sure a share is: the 95% Wilson score interval of a proportion of samples.

Wilson rather than the normal approximation because shares near 0 or 1 from a few dozen
samples are common here (a lock waited on in 95% of 40 samples). The interval treats samples as
independent draws; consecutive samples of one thread are correlated, so read it as a lower
bound on the uncertainty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the report model reads this module without pandas
    import pandas as pd

Z95 = 1.96
# Below this many samples behind its main share, a verdict is labelled low confidence and its
# severity capped: at 100 samples a 50% share is known to about +/-10 points. Where the share is
# known, its interval decides instead: one no wider than that (a 100% share of 61 samples is
# 94-100%) is no low confidence, however few the samples.
MIN_SAMPLES = 100
MAX_INTERVAL_WIDTH = 0.2  # a share's 95% interval wider than +/-10 points: low confidence


def too_uncertain(share: float | None, samples: int | None) -> bool:
    """Is a share of `samples` samples known too loosely to rest a verdict on? By its interval's
    width where the share is known, else by the sample count."""
    if samples is None:
        return False
    if share is None or not isinstance(share, (int, float)) or not 0.0 <= float(share) <= 1.0:
        return samples < MIN_SAMPLES
    low, high = wilson(float(share), int(samples))
    return high - low > MAX_INTERVAL_WIDTH


def wilson(share: float, samples: int, z: float = Z95) -> tuple[float, float]:
    """(low, high) of the interval for `share` observed in `samples` samples."""
    n = int(samples or 0)
    if n <= 0 or share is None or not math.isfinite(share):
        return (0.0, 1.0)
    p = min(1.0, max(0.0, float(share)))
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denominator = 1 + z * z / n
    low, high = (centre - spread) / denominator, (centre + spread) / denominator
    # Exact at the edges: a share of 1.0 has an upper bound of 1.0, not 1.0 - 1e-16.
    return (0.0 if p == 0.0 else max(0.0, low), 1.0 if p == 1.0 else min(1.0, high))


def is_share_key(key: str) -> bool:
    """Evidence keys that hold a proportion of samples (the others are counts, rates, seconds)."""
    if "cpu" in key or key.endswith("_os") or "core" in key:
        return False  # CPU time from /proc, not a count of samples
    return key.endswith("share") or "_share_" in key or key.startswith("share_")


def intervals_for(evidence: Mapping[str, object], samples: int | None,
                  share_samples: Mapping[str, int | None] | None = None,
                  calibrated_of: Mapping[str, int] | None = None) -> dict[str, dict[str, float]]:
    """Each share in `evidence` with its interval and the sample count behind it: `samples`, or
    for a share of another population its own count in `share_samples`. `calibrated_of`: for a
    share whose count is the effective count of calibrated states (calibrated_samples), how many
    samples carry those states ("calibrated_of" in its entry)."""
    share_samples = share_samples or {}
    calibrated_of = calibrated_of or {}
    out = {}
    for key, value in evidence.items():
        n = share_samples.get(key, samples)
        if n and isinstance(value, (int, float)) and not isinstance(value, bool) and is_share_key(key) \
                and 0.0 <= float(value) <= 1.0:
            low, high = wilson(float(value), n)
            out[key] = {"low": round(low, 4), "high": round(high, 4), "samples": int(n)}
            if calibrated_of.get(key):
                out[key]["calibrated_of"] = int(calibrated_of[key])
    return out


def calibrated_samples(samples: pd.DataFrame) -> int:
    """How many independent samples a state share of `samples` (sample-table rows) rests on.

    A calibrated sample's state is not observed: it is drawn from the mix of the few native
    samples of the same Python stack (classify/calibrate.py), so a thousand Python samples of one
    stack calibrated by twelve native samples know its state mix about as well as twelve do.
    With a share p_k of the samples in calibrated stack k of support s_k, the share's variance
    is p(1-p) * (1/N + sum_k p_k^2 / s_k), i.e. an effective count of 1 / (1/N + sum p_k^2/s_k).
    Stacks sharing one suffix mix (calibrate.SUFFIX_FRAMES) are taken as independent here, so
    this still reads as a lower bound on the uncertainty. Rows measured natively or estimated
    from frames count as themselves."""
    total = float(samples["count"].sum()) if len(samples) else 0.0
    if total <= 0:
        return 0
    import numpy as np  # here: the report model reads this module without numpy

    calibrated = (samples["state_source"] == "calibrated").to_numpy()
    if not calibrated.any():
        return int(total)
    # per calibrated stack: its samples and its support (every row of a stack has the same)
    stacks, at = np.unique(samples["stack"].to_numpy()[calibrated], return_inverse=True)
    count = np.bincount(at, weights=samples["count"].to_numpy(dtype=float)[calibrated],
                        minlength=len(stacks))
    support = np.zeros(len(stacks))
    np.maximum.at(support, at, samples["calibration_support"].to_numpy(dtype=float)[calibrated])
    kept = support > 0
    weight = count[kept] / total
    spread = float((weight * weight / support[kept]).sum())
    return max(1, int(round(1.0 / (1.0 / total + spread))))
