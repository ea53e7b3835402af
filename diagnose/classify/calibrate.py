"""Thread states for Python-only samples, calibrated by a sparse set of native samples.

The gentle sampling plan records Python stacks without stopping the target (py-spy
--nonblocking: cheap, but no native frames, so a lock wait, a GIL wait and running C code all
look alike) and, in a second recorder, a few native samples per second. Each native sample's
state is known (classify/state.py). Grouped by their Python frames, the native samples give the
state mix of every Python stack — "at server.py:88 in Model.predict: 71% waiting on a Lock, 29%
waiting for the GIL" — and that mix is given to the many Python-only samples with the same
Python frames. A mix needs support: at least MIN_SUPPORT native samples of that Python stack,
else of its innermost SUFFIX_FRAMES Python frames (the wait site and its caller usually decide
the state); a stack with less keeps the frame-only estimate rather than letting two samples
decide hundreds.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from diagnose.classify.state import FULL_SYMBOL_MARKERS, classify_stack
from diagnose.samples.profile import Frame, Profile

FrameKey = tuple[str, str, int]
PythonKey = tuple[FrameKey, ...]  # a stack's Python frames, root first (or its innermost few)
MIN_SUPPORT = 3
SUFFIX_FRAMES = 2


@dataclass(frozen=True)
class CalibratedState:
    state: str
    wait_kind: str
    site: FrameKey | None  # the acquiring / blocked Python frame
    # that frame's place among the stack's Python frames, counted from the innermost (0): a mix
    # found by its innermost frames alone (another stack's, sharing them) puts the site at the
    # same place in the stack it is given to, not at the other stack's frame
    site_depth: int | None = None


Mixture = list[tuple[CalibratedState, float]]  # states and their shares, largest first


@dataclass(frozen=True)
class Calibration:
    """State mixes by Python stack, and how many native samples stand behind each."""

    mixtures: dict[PythonKey, Mixture]
    support: dict[PythonKey, int]  # native samples
    suffix_mixtures: dict[PythonKey, Mixture]  # by the innermost SUFFIX_FRAMES python frames
    suffix_support: dict[PythonKey, int]

    def lookup(self, key: PythonKey) -> tuple[Mixture, int] | None:
        """The best-supported mix for a Python stack and its support, or None."""
        if self.support.get(key, 0) >= MIN_SUPPORT:
            return self.mixtures[key], self.support[key]
        suffix = key[-SUFFIX_FRAMES:]
        if self.suffix_support.get(suffix, 0) >= MIN_SUPPORT:
            return self.suffix_mixtures[suffix], self.suffix_support[suffix]
        return None

    def __bool__(self) -> bool:
        return bool(self.mixtures)

    @property
    def native_samples(self) -> int:
        return int(sum(self.support.values()))


def python_key(frames: list[Frame]) -> PythonKey:
    return tuple((f.function, f.file, f.line) for f in frames if not f.native)


def calibration_from(native: Profile) -> Calibration:
    """State mixes per Python stack, from a profile recorded with native frames."""
    counts = np.zeros(len(native.stacks), dtype=np.int64)
    for track in native.threads:
        weights = track.counts if track.counts is not None else None
        counts += np.bincount(track.stack_ids, weights=weights, minlength=len(native.stacks)).astype(np.int64)
    full_symbols = any(f.function in FULL_SYMBOL_MARKERS for f in native.frames)
    tallies: dict[PythonKey, dict[CalibratedState, int]] = defaultdict(lambda: defaultdict(int))
    for sid, stack in enumerate(native.stacks):
        if not counts[sid]:
            continue
        frames = [native.frames[i] for i in stack]
        result = classify_stack(frames, True, full_symbols)
        site = frames[result.site] if result.site >= 0 else None
        depth = (sum(1 for f in frames[result.site + 1:] if not f.native)
                 if site is not None and not site.native else None)
        state = CalibratedState(result.state, result.wait_kind,
                                (site.function, site.file, site.line) if site else None, depth)
        tallies[python_key(frames)][state] += int(counts[sid])
    suffix_tallies: dict[PythonKey, dict[CalibratedState, int]] = defaultdict(lambda: defaultdict(int))
    for key, by_state in tallies.items():
        for state, n in by_state.items():
            suffix_tallies[key[-SUFFIX_FRAMES:]][state] += n
    mixtures, support = _mixes(tallies)
    suffix_mixtures, suffix_support = _mixes(suffix_tallies)
    return Calibration(mixtures, support, suffix_mixtures, suffix_support)


def _mixes(tallies: dict[PythonKey, dict[CalibratedState, int]]
           ) -> tuple[dict[PythonKey, Mixture], dict[PythonKey, int]]:
    mixtures: dict[PythonKey, Mixture] = {}
    support: dict[PythonKey, int] = {}
    for key, by_state in tallies.items():
        total = sum(by_state.values())
        support[key] = total
        mixtures[key] = sorted(((s, n / total) for s, n in by_state.items()), key=lambda p: -p[1])
    return mixtures, support


def spread(n: int, mixture: Mixture) -> np.ndarray:
    """Which component each of n samples gets, in proportion and evenly spread over time
    (a golden-ratio sequence), so a 70/30 mix stays 70/30 in every stretch of the window."""
    cumulative = np.cumsum([share for _, share in mixture])
    cumulative[-1] = 1.0
    u = (np.arange(n) * 0.6180339887498949) % 1.0
    return np.searchsorted(cumulative, u, side="right")
