"""What vectorising the GIL's holder buys: its code made SPEEDUP times cheaper, by Amdahl.

The GIL's waits alone (the waiters running on the cores) were no figure for the first advice: a
vectorised holder loop removes the holder's own work and the waits queued behind it, and measured
10-15x that figure. How much cheaper vectorised code is depends on the code, which no profile
shows; SPEEDUP is fitted to two workloads' measured fixes (the gil_contention fixture and the text
service, below), so the figure is labelled calibrated, and the bound "if it cost nothing" stays
beside it. Those fixes are marked fitted in checks/calibration.py and never counted as evidence
that the figure predicts; the held-out ones are (a re-ranking service, below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from diagnose.checks.base import MAX_AMDAHL, Lever, LeverKind, pct
from diagnose.checks.calibration import fix_words
from diagnose.model.confidence import wilson
from diagnose.vocab import GIL_BOUND, ThreadState

if TYPE_CHECKING:
    import pandas as pd

    from diagnose.model.analysis import Analysis

# Vectorised (numpy), a pure-Python loop measured this many times cheaper. Fitted on (the rows
# marked fitted in checks/calibration.py, not evidence for it): the gil_contention fixture's
# postprocess loop, all of the busy time, 19.7-29.2x over the sessions' runs (0.98-1.13 of this
# figure at the cap); the text service's trigram counting (benchmarks/services/text_features.py),
# 55-88% of it, 3.5-4.5x where this figure predicted 2.4-4.3x (1.00-1.49 of it over 6 rounds).
# Held out (issue 42; benchmarks/services/embedding_rerank.py, cosine re-ranking in Python loops):
# predicted 2.75-4.14x over 6 rounds, measured 7.8-16.0x, 2.3-5.2 of the figure (median 3.91 and
# 3.04 over two runs of 3 rounds): a miss, not refitted. Amdahl on the 67-80% share the profile
# gave the loop allows at most 3-5x whatever this figure is.
SPEEDUP = 20.0
FIX = "the holder's loop vectorised"


def function_self_share(analysis: Analysis, samples: pd.DataFrame, function: str, reference: float,
                        file: str | None = None, states: tuple[ThreadState, ...] | None = None) -> float:
    """The share of `reference` samples among `samples` whose innermost Python frame is in
    `function` (of `file`, where given), any of its lines: its self time; with `states`, only its
    samples in those states."""
    if states is not None:
        samples = samples[samples["state"].isin(states)]
    site = samples["site"].to_numpy()
    has_site = site >= 0
    if not reference or not has_site.any():
        return 0.0
    # per site frame, by a count table over frame ids (in site order, as a groupby sums)
    counts = np.bincount(site[has_site], weights=samples["count"].to_numpy()[has_site])
    mine = 0.0
    for frame_id in np.flatnonzero(counts).tolist():
        frame = analysis.frame(frame_id)
        if frame.function == function and (file is None or frame.file == file):
            mine += float(counts[frame_id])
    return mine / reference


# A function is pure-Python code to vectorise when most of its own running samples run its
# bytecode. A numpy model's forward pass among many threads holds the GIL between its calls and
# runs native code in 92-98% of its samples: its GIL waits are the threads' handoffs, not a loop
# to vectorise.
PYTHON_MAJORITY = 0.5
# ...and a loop when its own bytecode (running or queueing for the GIL to) is at least this share
# of the busy time. Among 64 threads of a numpy model the GIL's holder most seen at a wait was
# their request loop, at 1-2% of it: the GIL waits were the threads' handoffs, and the waits
# "behind" it ranked vectorising a request loop at 1.5-1.8x on 2 attaches in 5. The loops
# vectorising fixed measured 23-71% (checks/calibration.py).
HOT_LOOP_SHARE = 0.1


def hot_loop_share(analysis: Analysis, samples: pd.DataFrame, function: str, file: str | None = None,
                   scale: float = 1.0) -> float | None:
    """`function`'s GIL-bound self time (running its bytecode, or queueing for the GIL to) among
    `samples`, as a share of them, times `scale`: the part vectorising it removes. None where that
    is no loop to vectorise: without native frames (its bytecode and the numpy calls under it look
    alike), for code that mostly runs native code already, under HOT_LOOP_SHARE, and in a
    pipeline, whose bottleneck stage bounds the gain (pipeline_gain)."""
    if analysis.structure.pipeline or not (analysis.profile.native or analysis.profile.calibrated):
        return None
    reference = float(samples["count"].sum())
    python = function_self_share(analysis, samples, function, reference, file, (ThreadState.PYTHON,))
    running = python + function_self_share(analysis, samples, function, reference, file, (ThreadState.NATIVE,))
    if not running or python / running < PYTHON_MAJORITY:
        return None
    own = function_self_share(analysis, samples, function, reference, file, GIL_BOUND) * scale
    return own if own >= HOT_LOOP_SHARE else None


def speedup_gain(share: float) -> float:
    """Amdahl for a share `share` of the time made SPEEDUP times cheaper (capped as amdahl is)."""
    share = min(1.0, max(0.0, share))
    return min(MAX_AMDAHL, 1.0 / ((1.0 - share) + share / SPEEDUP))


@dataclass(frozen=True)
class Vectorised:
    """The holder `function`'s share of the request threads' busy time (its self time and the GIL
    waits behind it), over `samples` samples."""

    function: str
    share: float
    samples: int
    of: str
    check: str = "gil_contention"  # whose measured fixes say how the figure fared

    @property
    def gain(self) -> float:
        return round(speedup_gain(self.share), 2)

    @property
    def interval(self) -> tuple[float, float]:
        """The gain at the ends of the share's 95% interval (containing the point)."""
        low, high = (round(speedup_gain(end), 2) for end in wilson(self.share, self.samples))
        return min(low, self.gain), max(high, self.gain)

    def basis(self) -> str:
        fared = fix_words(self.check, FIX)
        return (f"calibrated: {self.function} is {pct(self.share)} of {self.of}; vectorised "
                f"{SPEEDUP:g}x cheaper, it buys {self.gain:.2f}x (Amdahl)"
                + (f" ({fared})" if fared else ""))

    def lever(self) -> Lever:
        return Lever(LeverKind.REMOVE_WORK, self.gain, f"if {self.function} were vectorised",
                     self.basis())
