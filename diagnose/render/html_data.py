"""Shapes the analysis into the page's data (docs/report-data.md): aggregated, interned, small."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.classify.categories import CATEGORIES, Categorizer
from diagnose.model.analysis import Analysis
from diagnose.model.vocab import STATES, page_vocabulary
from diagnose.render.evidence import describe_evidence

MAX_TIMELINE_STEPS = 3000  # enough resolution for a screen; longer windows are coarsened


def flame_data(analysis: Analysis, categorizer: Categorizer) -> dict:
    grouped = (analysis.samples.groupby(["stack", "thread", "state"], observed=True)["count"]
               .sum().reset_index())
    strings: dict[str, int] = {}
    frame_index: dict[int, int] = {}
    frames: list[list] = []

    def intern(text: str) -> int:
        idx = strings.get(text)
        if idx is None:
            idx = strings[text] = len(strings)
        return idx

    def frame_ref(fid: int) -> int:
        idx = frame_index.get(fid)
        if idx is None:
            f = analysis.profile.frames[fid]
            cat = categorizer.categorize(f).category
            idx = frame_index[fid] = len(frames)
            frames.append([intern(f.function), intern(f.file), int(f.line), CATEGORIES.index(cat)])
        return idx

    state_index = {s: i for i, s in enumerate(STATES)}
    stacks = []
    for stack_id, thread, state, count in grouped.itertuples(index=False):
        path = [frame_ref(fid) for fid in analysis.profile.stacks[stack_id]]
        stacks.append([path, int(thread), state_index[state], int(count)])
    return {"strings": list(strings), "frames": frames, "stacks": stacks}


def timeline_data(analysis: Analysis) -> dict:
    samples = analysis.samples
    timed = samples[samples["t"].notna()]
    if timed.empty:
        return {"interval_s": analysis.profile.interval_s, "steps": 0, "lanes": []}
    interval = analysis.profile.interval_s or 0.01
    window = float(timed["t"].max()) + interval
    if analysis.profile.window_s:
        # measured instants: the whole recorded window, threads where they ran in it
        window = max(window, analysis.profile.window_s)
    steps = int(np.ceil(window / interval))
    if steps > MAX_TIMELINE_STEPS:
        interval = window / MAX_TIMELINE_STEPS
        steps = MAX_TIMELINE_STEPS
    # (+1e-6 of a step: an instant k * interval computed in floating point lands in step k)
    step = np.minimum(np.floor(timed["t"].to_numpy() / interval + 1e-6).astype(np.int64), steps - 1)
    frame = pd.DataFrame({"thread": timed["thread"].to_numpy(), "step": step,
                          "state": timed["state"].cat.codes.to_numpy()})
    frame = frame.drop_duplicates(["thread", "step"], keep="last")
    lanes = []
    for thread, group in frame.groupby("thread", sort=True):
        lane = np.full(steps, -1, dtype=np.int64)
        lane[group["step"].to_numpy()] = group["state"].to_numpy()
        change = np.flatnonzero(np.diff(lane)) + 1
        starts = np.concatenate(([0], change))
        lengths = np.diff(np.concatenate((starts, [steps])))
        lanes.append({"thread": int(thread),
                      "runs": [[int(lane[s]), int(n)] for s, n in zip(starts, lengths)]})
    return {"interval_s": round(interval, 6), "steps": steps, "lanes": lanes}


def page_data(report: dict, analysis: Analysis, categorizer: Categorizer, generated_at: str) -> dict:
    return {
        "report": report,
        # Per finding, in the report's order: its evidence as labelled rows with units.
        "evidence_text": [describe_evidence(f) for f in report.get("findings") or []],
        "generated_at": generated_at,
        "states": list(STATES),
        "categories": list(CATEGORIES),
        # The words the page shows and the orders it sorts by (model/vocab.py).
        "vocabulary": page_vocabulary(),
        "threads": report["threads"],
        "flame": flame_data(analysis, categorizer),
        "timeline": timeline_data(analysis),
    }
