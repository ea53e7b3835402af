"""The samples as a table of distinct stacks (the report's `Stacks`): what `diagnose export`
(pprof), `diagnose diff` (differential flame graph) and `--push` need from a report without its
recording: the frames, one row per distinct stack with its thread, state, leaf category and
count (`stack`: frame indices, root first), and the seconds each sample stands for.

Rows are the sample table grouped by (stack, thread, state, leaf category): a sample of a
calibrated stack whose state is a mix counts once per state it was given.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from diagnose.model.analysis import Analysis
from diagnose.report.model import StackFrame, StackRow, Stacks


def stack_rows(analysis: Analysis) -> Stacks:
    profile = analysis.profile
    samples = analysis.samples
    if not len(samples):
        return Stacks((), (), profile.interval_s)
    grouped = (samples.groupby(["stack", "thread", "state", "leaf_category"], observed=True)["count"]
               .sum().reset_index())
    grouped = grouped[grouped["count"] > 0]
    # The thread facts of every row, looked up once per thread (not once per row).
    threads = analysis.threads
    facts = {int(index): (int(tid), str(name), None if pd.isna(pid) else int(pid), str(role))
             for index, tid, name, pid, role in zip(threads.index, threads["tid"], threads["name"],
                                                    threads["pid"], threads["role"])}
    # Each distinct stack's path in the report's frame list (frames numbered as they first
    # appear, stacks in id order), built once per stack without a Python walk of its frames.
    used, paths = profile.numbered_paths(grouped["stack"].to_numpy())
    frames = tuple(StackFrame(frame.function, frame.file, int(frame.line), bool(frame.native))
                   for frame in map(profile.frames.__getitem__, used))
    # Heaviest first (a stable sort: rows of equal count keep the grouping's order).
    grouped = grouped.iloc[np.argsort(-grouped["count"].to_numpy(), kind="stable")]
    rows = tuple(
        StackRow(stack=tuple(paths[stack_id]), tid=fact[0], thread=fact[1], pid=fact[2],
                 role=fact[3], state=state, category=category, count=count)
        for stack_id, fact, state, category, count in zip(
            grouped["stack"].tolist(), map(facts.__getitem__, grouped["thread"].tolist()),
            grouped["state"].astype(str).tolist(), grouped["leaf_category"].astype(str).tolist(),
            grouped["count"].astype("int64").tolist()))
    return Stacks(frames, rows, profile.interval_s)
