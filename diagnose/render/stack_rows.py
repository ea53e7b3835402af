"""The samples as a table of distinct stacks: what `diagnose export` (pprof), `diagnose diff`
(differential flame graph) and `--push` need from a report without its recording.

    {"frames": [{"function", "file", "line", "native"}...],
     "samples": [{"stack": [frame index, root first...], "tid", "thread", "pid", "role",
                  "state", "category", "count"}...],
     "interval_s": seconds each sample stands for}

Rows are the sample table grouped by (stack, thread, state, leaf category): a sample of a
calibrated stack whose state is a mix counts once per state it was given.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from diagnose.model.analysis import Analysis


def stack_rows(analysis: Analysis) -> dict:
    profile = analysis.profile
    samples = analysis.samples
    if not len(samples):
        return {"frames": [], "samples": [], "interval_s": profile.interval_s}
    grouped = (samples.groupby(["stack", "thread", "state", "leaf_category"], observed=True)["count"]
               .sum().reset_index())
    grouped = grouped[grouped["count"] > 0]
    threads = analysis.threads
    used_frames: dict[int, int] = {}
    frames: list[dict] = []

    def frame_index(frame_id: int) -> int:
        if frame_id not in used_frames:
            frame = profile.frames[frame_id]
            used_frames[frame_id] = len(frames)
            frames.append({"function": frame.function, "file": frame.file, "line": int(frame.line),
                           "native": bool(frame.native)})
        return used_frames[frame_id]

    rows: list[dict[str, Any]] = []
    for stack_id, thread, state, category, count in grouped.itertuples(index=False):
        info = threads.loc[int(thread)]
        pid = info["pid"]
        rows.append({
            "stack": [frame_index(f) for f in profile.stacks[int(stack_id)]],
            "tid": int(info["tid"]), "thread": str(info["name"]),
            "pid": None if pd.isna(pid) else int(pid), "role": str(info["role"]),
            "state": str(state), "category": str(category), "count": int(count),
        })
    rows.sort(key=lambda r: -r["count"])
    return {"frames": frames, "samples": rows, "interval_s": profile.interval_s}
