"""The sample table: a row per thread per sample, or per run of identical consecutive samples
of a thread (model/runs.py), with its stack and inferred state.

Columns are declared once here; `validate` checks a table where it enters the pipeline.
Classification runs once per distinct stack and is broadcast to the samples by stack id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

from diagnose.classify.categories import CATEGORIES, Categorizer
from diagnose.classify.state import FULL_SYMBOL_MARKERS, every_stack_state, stack_states
from diagnose.classify.calibrate import CalibratedState, Calibration, FrameKey, Mixture, python_key, spread
from diagnose.samples.profile import Frame, Profile
from diagnose.model.runs import run_starts, run_step_s
from diagnose.vocab import STATES, WAIT_KINDS

PHASES_AND_OTHER = ("preprocess", "model", "postprocess", "other")

SAMPLE_COLUMNS = {
    "thread": "int32",      # index into the thread summary
    "tid": "int64",         # OS thread id
    "t": "float64",         # seconds since the window began (NaN when the input has no order):
    # measured with timestamped input (Profile.instants), else reconstructed from sample order
    "stack": "int32",       # index into Profile.stacks
    "count": "int64",       # samples this row stands for (a run's length, or a collapsed count)
    "state": pd.CategoricalDtype(STATES),
    "wait_kind": pd.CategoricalDtype(WAIT_KINDS),
    "site": "int32",        # frame id of the acquiring / blocked Python frame, -1 if none
    "phase": pd.CategoricalDtype(PHASES_AND_OTHER),
    "leaf_category": pd.CategoricalDtype(CATEGORIES),
    "estimated": "bool",    # state inferred without native frames
    # Where the state came from: the sample's own native frames ("measured"), the mix of native
    # samples of the same Python stack ("calibrated"), or the Python frames alone ("estimated").
    "state_source": pd.CategoricalDtype(("measured", "calibrated", "estimated")),
    "calibration_support": "int32",  # native samples behind a calibrated state, else 0
}


@dataclass
class StackTable:
    """Per distinct stack: what classification decided (index = stack id)."""

    state: np.ndarray
    wait_kind: np.ndarray
    site: np.ndarray
    phase: np.ndarray
    leaf_category: np.ndarray
    estimated: np.ndarray
    calibrated: np.ndarray  # bool per stack
    support: np.ndarray  # native samples behind a calibrated stack
    # Stacks whose samples get a calibrated mix of states: stack id -> [(state, wait_kind,
    # site frame id)...] and their shares (see classify/calibrate.py).
    mixtures: dict[int, tuple[list[tuple[str, str, int]], Mixture]] = field(default_factory=dict)


def classify_stacks(profile: Profile, categorizer: Categorizer, calibration: Calibration | None = None
                    ) -> StackTable:
    """`calibration`: a classify.calibrate.Calibration, for a profile without native frames."""
    n = len(profile.stacks)
    state = np.empty(n, dtype=object)
    wait_kind = np.empty(n, dtype=object)
    site = np.full(n, -1, dtype=np.int32)
    phase = np.empty(n, dtype=object)
    leaf_cat = np.empty(n, dtype=object)
    estimated = np.zeros(n, dtype=bool)
    calibrated = np.zeros(n, dtype=bool)
    support = np.zeros(n, dtype=np.int32)
    mixtures: dict[int, tuple[list[tuple[str, str, int]], Mixture]] = {}
    full_symbols = any(f.function in FULL_SYMBOL_MARKERS for f in profile.frames)
    flat, offsets = profile.stack_frames()
    phases, leaves = categorizer.phases_of_stacks(profile.frames, flat, offsets)
    phase[:] = phases
    leaf_cat[:] = leaves
    if calibration is None:
        # every stack's own state, taken whole from the profile's shared classification
        table = every_stack_state(profile, full_symbols)
        state[:], wait_kind[:], estimated[:] = table.state, table.wait_kind, table.estimated
        inside = table.site >= 0
        site[inside] = flat[offsets[:-1][inside] + table.site[inside]]
        return StackTable(state, wait_kind, site, phase, leaf_cat, estimated, calibrated, support,
                          mixtures)
    state_of = stack_states(profile, full_symbols)
    for sid, stack in enumerate(profile.stacks):
        found = calibration.lookup(python_key([profile.frames[i] for i in stack]))
        if found:
            mixture, support[sid] = found
            calibrated[sid] = True
            python_frames = [i for i in stack if not profile.frames[i].native]
            components = [(c.state, c.wait_kind, _site_in(profile, c, python_frames)) for c, _ in mixture]
            state[sid], wait_kind[sid], site[sid] = components[0]
            if len(components) > 1:
                mixtures[sid] = (components, mixture)
        else:
            result = state_of(sid)
            state[sid], wait_kind[sid], estimated[sid] = result.state, result.wait_kind, result.estimated
            site[sid] = stack[result.site] if result.site >= 0 else -1
    return StackTable(state, wait_kind, site, phase, leaf_cat, estimated, calibrated, support, mixtures)


def _site_in(profile: Profile, component: CalibratedState, python_frames: list[int]) -> int:
    """The calibrated site as a frame of the stack it is given to: the frame at the site's place
    among its Python frames (a mix found by the innermost frames alone is another stack's,
    whose own frame may be elsewhere in the program); by its key where no place is known."""
    depth = component.site_depth
    if component.site is None:
        return -1
    if depth is None:
        return _frame_id(profile, component.site)
    return python_frames[-1 - depth] if depth < len(python_frames) else -1


def _frame_id(profile: Profile, key: FrameKey | None) -> int:
    if key is None:
        return -1
    return profile.frame_id(Frame(key[0], key[1], key[2], False))


def _codes(values: np.ndarray, categories: Sequence[str]) -> np.ndarray:
    """Per distinct stack: the category code of its value (-1 for a value not among them)."""
    index = {c: i for i, c in enumerate(categories)}
    codes, distinct = pd.factorize(np.asarray(values, dtype=object))  # None: code -1
    mapped = np.array([index.get(v, -1) for v in distinct] + [-1], dtype=np.int16)
    return mapped[codes]  # code -1 takes the trailing -1


def build_sample_table(profile: Profile, stacks: StackTable) -> pd.DataFrame:
    """Columns are numpy arrays joined across threads; every per-stack decision is taken from
    the stack table by stack id (categorical codes, never a string per sample)."""
    threads, times, ids, counts = [], [], [], []
    tids = []
    unmerged = None
    if stacks.mixtures:
        unmerged = np.zeros(len(stacks.state), dtype=bool)
        unmerged[list(stacks.mixtures)] = True
    for index, track in enumerate(profile.threads):
        stack_ids = np.asarray(track.stack_ids, dtype=np.int32)
        n = len(stack_ids)
        if track.times is not None:
            t = track.times - profile.origin_s  # measured: where the thread ran in the window
        elif track.timed:
            # reconstructed: the thread's samples laid end to end from the window's start
            t = np.cumsum(track.weights) - track.weights
        else:
            t = np.full(n, np.nan)
        count = (track.counts.astype(np.int64, copy=False) if track.counts is not None
                 else np.ones(n, dtype=np.int64))
        if run_step_s(track) is not None:
            # consecutive samples of one stack: one row with their count (model/runs.py)
            starts = run_starts(stack_ids, unmerged)
            count = np.diff(np.append(starts, n)).astype(np.int64)
            stack_ids, t = stack_ids[starts], t[starts]
            n = len(starts)
        threads.append(np.full(n, index, dtype=np.int32))
        tids.append(np.full(n, track.tid, dtype=np.int64))
        times.append(np.asarray(t, dtype=np.float64))
        ids.append(stack_ids)
        counts.append(count)

    def joined(parts: list[np.ndarray], dtype: npt.DTypeLike) -> np.ndarray:
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)

    sid = joined(ids, np.int32)
    df = pd.DataFrame({"thread": joined(threads, np.int32), "tid": joined(tids, np.int64),
                       "t": joined(times, np.float64), "stack": sid, "count": joined(counts, np.int64)})
    state = _codes(stacks.state, STATES)[sid]
    wait_kind = _codes(stacks.wait_kind, WAIT_KINDS)[sid]
    site = stacks.site[sid]
    if stacks.mixtures and len(sid):
        # Samples of a calibrated stack get its mix of states, spread evenly over its samples.
        order = np.argsort(sid, kind="stable")
        bounds = np.searchsorted(sid[order], np.arange(len(stacks.state) + 1))
        state_index = {c: i for i, c in enumerate(STATES)}
        kind_index = {c: i for i, c in enumerate(WAIT_KINDS)}
        for stack_id, (components, mixture) in stacks.mixtures.items():
            rows = order[bounds[stack_id]:bounds[stack_id + 1]]
            if not len(rows):
                continue
            choice = spread(len(rows), mixture)
            state[rows] = np.array([state_index.get(c[0], -1) for c in components], dtype=np.int16)[choice]
            wait_kind[rows] = np.array([kind_index.get(c[1], -1) for c in components], dtype=np.int16)[choice]
            site[rows] = np.array([c[2] for c in components], dtype=np.int32)[choice]
    df["state"] = pd.Categorical.from_codes(state, dtype=SAMPLE_COLUMNS["state"])
    df["wait_kind"] = pd.Categorical.from_codes(wait_kind, dtype=SAMPLE_COLUMNS["wait_kind"])
    df["site"] = site
    df["phase"] = pd.Categorical.from_codes(_codes(stacks.phase, PHASES_AND_OTHER)[sid],
                                            dtype=SAMPLE_COLUMNS["phase"])
    df["leaf_category"] = pd.Categorical.from_codes(_codes(stacks.leaf_category, CATEGORIES)[sid],
                                                    dtype=SAMPLE_COLUMNS["leaf_category"])
    df["estimated"] = stacks.estimated[sid]
    source = np.where(stacks.calibrated, 1, np.where(stacks.estimated, 2, 0)).astype(np.int8)
    df["state_source"] = pd.Categorical.from_codes(source[sid], dtype=SAMPLE_COLUMNS["state_source"])
    df["calibration_support"] = stacks.support[sid]
    return validate(df)


def validate(df: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"sample table lacks columns {missing}")
    out = df[list(SAMPLE_COLUMNS)]
    if any(out[column].dtype != dtype for column, dtype in SAMPLE_COLUMNS.items()):
        out = out.astype(SAMPLE_COLUMNS)  # a cast copies every column: only where one differs
    if out["state"].isna().any():
        raise ValueError("sample table has samples with no state")
    return out


