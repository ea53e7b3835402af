"""Shapes the analysis into the page's data (docs/report-data.md): aggregated, interned, small."""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.classify.categories import CATEGORIES, Categorizer
from diagnose.model.analysis import Analysis
from diagnose.model.runs import bins_of_rows, last_instants, thread_steps
from diagnose.model.vocab import STATES, page_vocabulary
from diagnose.render.evidence import SKIPPED, describe_evidence
from diagnose.report.model import Report

MAX_TIMELINE_STEPS = 3000  # enough resolution for a screen; longer windows are coarsened
# (stack, thread, state) rows the page's flame graph carries: the heaviest ones; the rest are folded
# per thread and state into one frame saying how many stacks it stands for (the page draws at
# most a few thousand frames anyway; a recording of 300,000 distinct stacks stays a page of MBs)
MAX_FLAME_ROWS = 20_000


def flame_data(analysis: Analysis, categorizer: Categorizer) -> dict:
    grouped = (analysis.samples.groupby(["stack", "thread", "state"], observed=True)["count"]
               .sum().reset_index())
    strings: dict[str, int] = {}
    frame_index: dict[int, int] = {}
    frames: list[list] = []
    paths: dict[int, list[int]] = {}

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

    def path_of(stack_id: int) -> list[int]:  # once per distinct stack
        path = paths.get(stack_id)
        if path is None:
            path = paths[stack_id] = [frame_ref(fid) for fid in analysis.profile.stacks[stack_id]]
        return path

    state_index = {s: i for i, s in enumerate(STATES)}
    stack_ids, threads = grouped["stack"].tolist(), grouped["thread"].tolist()
    states, counts = grouped["state"].astype(str).tolist(), grouped["count"].tolist()
    keep: range | list[int] = range(len(stack_ids))
    rest: dict[tuple[int, str], list[int]] = {}
    if len(stack_ids) > MAX_FLAME_ROWS:
        # The heaviest rows are drawn; the others are folded, per thread and state, into one
        # frame that says how many stacks it stands for (totals per thread and state stay whole).
        order = np.argsort(-grouped["count"].to_numpy(), kind="stable")
        keep = sorted(order[:MAX_FLAME_ROWS].tolist())
        lighter = order[MAX_FLAME_ROWS:]
        # per (thread, state) in the order the heaviest-first walk meets them
        sums = (pd.DataFrame({"thread": grouped["thread"].to_numpy()[lighter],
                              "state": grouped["state"].astype(str).to_numpy()[lighter],
                              "count": grouped["count"].to_numpy()[lighter]})
                .groupby(["thread", "state"], sort=False)["count"].agg(["size", "sum"]))
        for (thread, state), size, total in zip(sums.index.tolist(), sums["size"].tolist(),
                                                sums["sum"].tolist()):
            rest[(int(thread), str(state))] = [int(size), int(total)]
    # The drawn stacks' paths, frames numbered as they first appear (keep is in row order, and
    # the rows are sorted by stack id), without a Python walk of each stack's frames.
    used, numbered = analysis.profile.numbered_paths([stack_ids[i] for i in keep])
    for fid in used:
        frame_ref(fid)
    paths.update(numbered)
    stacks = [[list(path_of(stack_ids[i])), int(threads[i]), state_index[states[i]], int(counts[i])]
              for i in keep]
    for (thread, state), (rows, count) in rest.items():
        folded = len(frames)
        frames.append([intern(f"({rows:,} rarer stacks, not drawn)"), intern(""), 0,
                       CATEGORIES.index("other")])
        stacks.append([[folded], int(thread), state_index[state], count])
    return {"strings": list(strings), "frames": frames, "stacks": stacks}


def timeline_data(analysis: Analysis) -> dict:
    samples = analysis.samples
    timed = samples[samples["t"].notna()]
    if timed.empty:
        return {"interval_s": analysis.profile.interval_s, "steps": 0, "lanes": []}
    interval = analysis.profile.interval_s or 0.01
    # a row may be a run of instants (model/runs.py): the window ends at the last of them
    thread, t, count = timed["thread"].to_numpy(), timed["t"].to_numpy(), timed["count"].to_numpy()
    run_steps = thread_steps(analysis.profile)
    window = float(last_instants(thread, t, count, run_steps).max()) + interval
    if analysis.profile.window_s:
        # measured instants: the whole recorded window, threads where they ran in it
        window = max(window, analysis.profile.window_s)
    steps = int(np.ceil(window / interval))
    if steps > MAX_TIMELINE_STEPS:
        interval = window / MAX_TIMELINE_STEPS
        steps = MAX_TIMELINE_STEPS
    row, step = bins_of_rows(thread, t, count, run_steps, interval, steps)
    frame = pd.DataFrame({"thread": thread[row], "step": step,
                          "state": timed["state"].cat.codes.to_numpy()[row]})
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


def page_data(report: Report, analysis: Analysis, categorizer: Categorizer, generated_at: str,
              data: dict | None = None) -> dict:
    """`data`: `report.to_json()` when the caller has it already (the .json file's)."""
    data = report.to_json() if data is None else data
    return {
        # The whole .json report, its `stacks` table included: the page is the one file people
        # attach to a ticket, and `diagnose diff` / `export` read it as they read the .json.
        "report": data,
        # Per finding, in the report's order: its evidence as labelled rows with units.
        "evidence_text": [[row.to_json() for row in describe_evidence(f)] for f in report.findings],
        # The evidence keys shown another way than as a row (the knob line, the thread dump).
        "evidence_hidden": list(SKIPPED),
        "generated_at": generated_at,
        "states": list(STATES),
        "categories": list(CATEGORIES),
        # The words the page shows and the orders it sorts by (model/vocab.py).
        "vocabulary": page_vocabulary(),
        "threads": data["threads"],
        "flame": flame_data(analysis, categorizer),
        "timeline": timeline_data(analysis),
    }
