"""Thread states for Python-only samples, calibrated by a sparse set of native samples.

The gentle sampling plan records Python stacks without stopping the target (py-spy
--nonblocking: cheap, but no native frames, so a lock wait, a GIL wait and running C code all
look alike) and, in a second recorder, a few native samples per second. Each native sample's
state is known (classify/state.py). Grouped by their Python frames, the native samples give the
state mix of every Python stack — "at server.py:88 in Model.predict: 71% waiting on a Lock, 29%
waiting for the GIL" — and that mix is given to the many Python-only samples with the same
Python frames. Python stacks the native samples never saw keep the frame-only estimate.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from diagnose.classify.state import FULL_SYMBOL_MARKERS, classify_stack
from diagnose.model.profile import Frame, Profile

FrameKey = tuple[str, str, int]


@dataclass(frozen=True)
class CalibratedState:
    state: str
    wait_kind: str
    site: FrameKey | None  # the acquiring / blocked Python frame


Mixture = list[tuple[CalibratedState, float]]  # states and their shares, largest first


def python_key(frames: list[Frame]) -> tuple[FrameKey, ...]:
    return tuple((f.function, f.file, f.line) for f in frames if not f.native)


def calibration_from(native: Profile) -> dict[tuple[FrameKey, ...], Mixture]:
    """State mixes per Python stack, from a profile recorded with native frames."""
    counts = np.zeros(len(native.stacks), dtype=np.int64)
    for track in native.threads:
        weights = track.counts if track.counts is not None else None
        counts += np.bincount(track.stack_ids, weights=weights, minlength=len(native.stacks)).astype(np.int64)
    full_symbols = any(f.function in FULL_SYMBOL_MARKERS for f in native.frames)
    tallies: dict[tuple, dict[CalibratedState, int]] = defaultdict(lambda: defaultdict(int))
    for sid, stack in enumerate(native.stacks):
        if not counts[sid]:
            continue
        frames = [native.frames[i] for i in stack]
        result = classify_stack(frames, True, full_symbols)
        site = frames[result.site] if result.site >= 0 else None
        state = CalibratedState(result.state, result.wait_kind,
                                (site.function, site.file, site.line) if site else None)
        tallies[python_key(frames)][state] += int(counts[sid])
    calibration = {}
    for key, by_state in tallies.items():
        total = sum(by_state.values())
        calibration[key] = sorted(((s, n / total) for s, n in by_state.items()), key=lambda p: -p[1])
    return calibration


def spread(n: int, mixture: Mixture) -> np.ndarray:
    """Which component each of n samples gets, in proportion and evenly spread over time
    (a golden-ratio sequence), so a 70/30 mix stays 70/30 in every stretch of the window."""
    cumulative = np.cumsum([share for _, share in mixture])
    cumulative[-1] = 1.0
    u = (np.arange(n) * 0.6180339887498949) % 1.0
    return np.searchsorted(cumulative, u, side="right")
