"""The sample table: a row per thread per sample, with its stack and inferred state.

Columns are declared once here; `validate` checks a table where it enters the pipeline.
Classification runs once per distinct stack and is broadcast to the samples by stack id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from diagnose.classify.categories import CATEGORIES, Categorizer
from diagnose.classify.state import FULL_SYMBOL_MARKERS, classify_stack
from diagnose.classify.calibrate import python_key, spread
from diagnose.model.profile import Frame, Profile
from diagnose.model.vocab import STATES, WAIT_KINDS

PHASES_AND_OTHER = ("preprocess", "model", "postprocess", "other")

SAMPLE_COLUMNS = {
    "thread": "int32",      # index into the thread summary
    "tid": "int64",         # OS thread id
    "t": "float64",         # seconds since the window began (NaN when the input has no order):
    # measured with timestamped input (Profile.instants), else reconstructed from sample order
    "stack": "int32",       # index into Profile.stacks
    "count": "int64",       # samples this row stands for (1 unless the input was collapsed)
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
    mixtures: dict = field(default_factory=dict)


def classify_stacks(profile: Profile, categorizer: Categorizer, calibration=None) -> StackTable:
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
    mixtures = {}
    full_symbols = any(f.function in FULL_SYMBOL_MARKERS for f in profile.frames)
    for sid, stack in enumerate(profile.stacks):
        frames = [profile.frames[i] for i in stack]
        found = calibration.lookup(python_key(frames)) if calibration else None
        if found:
            mixture, support[sid] = found
            calibrated[sid] = True
            components = [(c.state, c.wait_kind, _frame_id(profile, c.site)) for c, _ in mixture]
            state[sid], wait_kind[sid], site[sid] = components[0]
            if len(components) > 1:
                mixtures[sid] = (components, mixture)
        else:
            result = classify_stack(frames, profile.native, full_symbols)
            state[sid], wait_kind[sid], estimated[sid] = result.state, result.wait_kind, result.estimated
            site[sid] = stack[result.site] if result.site >= 0 else -1
        phase[sid] = categorizer.phase_of(frames)
        leaf_cat[sid] = categorizer.categorize(frames[-1]).category if frames else "other"
    return StackTable(state, wait_kind, site, phase, leaf_cat, estimated, calibrated, support, mixtures)


def _frame_id(profile: Profile, key) -> int:
    if key is None:
        return -1
    return profile.frame_id(Frame(key[0], key[1], key[2], False))


def build_sample_table(profile: Profile, stacks: StackTable) -> pd.DataFrame:
    parts = []
    for index, track in enumerate(profile.threads):
        ids = track.stack_ids
        n = len(ids)
        if track.times is not None:
            t = track.times - profile.origin_s  # measured: where the thread ran in the window
        elif track.timed:
            # reconstructed: the thread's samples laid end to end from the window's start
            t = np.cumsum(track.weights) - track.weights
        else:
            t = np.full(n, np.nan)
        counts = track.counts if track.counts is not None else np.ones(n, dtype=np.int64)
        parts.append(pd.DataFrame({
            "thread": np.full(n, index, dtype=np.int32),
            "tid": np.full(n, track.tid, dtype=np.int64),
            "t": t,
            "stack": ids,
            "count": counts,
        }))
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        {c: pd.Series(dtype="int64") for c in ("thread", "tid", "t", "stack", "count")})
    sid = df["stack"].to_numpy()
    state, wait_kind, site = stacks.state[sid], stacks.wait_kind[sid], stacks.site[sid]
    for stack_id, (components, mixture) in stacks.mixtures.items():
        rows = np.flatnonzero(sid == stack_id)
        for row, choice in zip(rows, spread(len(rows), mixture)):
            state[row], wait_kind[row], site[row] = components[choice]
    df["state"] = _categorical(state, STATES, sid)
    df["wait_kind"] = _categorical(wait_kind, WAIT_KINDS, sid)
    df["site"] = site
    df["phase"] = _categorical(stacks.phase[sid], PHASES_AND_OTHER, sid)
    df["leaf_category"] = _categorical(stacks.leaf_category[sid], CATEGORIES, sid)
    df["estimated"] = stacks.estimated[sid]
    source = np.where(stacks.calibrated[sid], "calibrated",
                      np.where(stacks.estimated[sid], "estimated", "measured"))
    df["state_source"] = pd.Categorical(source, categories=("measured", "calibrated", "estimated"))
    df["calibration_support"] = stacks.support[sid]
    return validate(df)


def validate(df: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in SAMPLE_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"sample table lacks columns {missing}")
    out = df[list(SAMPLE_COLUMNS)].astype(SAMPLE_COLUMNS)
    if out["state"].isna().any():
        raise ValueError("sample table has samples with no state")
    return out


def _categorical(values, categories, sid) -> pd.Categorical:
    """A column of the sample table; an empty table's is empty (whatever `values` holds)."""
    return pd.Categorical(values if len(sid) else [], categories=categories)
