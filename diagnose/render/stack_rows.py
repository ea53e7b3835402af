"""The samples as a table of distinct stacks (the report's `Stacks`): what `diagnose export`
(pprof), `diagnose diff` (differential flame graph) and `--push` need from a report without its
recording: the frames, one row per distinct stack with its thread, state, leaf category and
count (`stack`: frame indices, root first), and the seconds each sample stands for.

Rows are the sample table grouped by (stack, thread, state, leaf category): a sample of a
calibrated stack whose state is a mix counts once per state it was given.
"""

from __future__ import annotations

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
    # Each distinct stack's path in the report's frame list, built once per stack.
    used_frames: dict[int, int] = {}
    frames: list[StackFrame] = []
    paths: dict[int, list[int]] = {}

    def path_of(stack_id: int) -> list[int]:
        path = paths.get(stack_id)
        if path is None:
            path = []
            for frame_id in profile.stacks[stack_id]:
                index = used_frames.get(frame_id)
                if index is None:
                    frame = profile.frames[frame_id]
                    index = used_frames[frame_id] = len(frames)
                    frames.append(StackFrame(frame.function, frame.file, int(frame.line),
                                             bool(frame.native)))
                path.append(index)
            paths[stack_id] = path
        return path

    rows: list[StackRow] = []
    for stack_id, thread, state, category, count in zip(
            grouped["stack"].tolist(), grouped["thread"].tolist(), grouped["state"].astype(str).tolist(),
            grouped["leaf_category"].astype(str).tolist(), grouped["count"].tolist()):
        tid, name, pid, role = facts[thread]
        rows.append(StackRow(stack=tuple(path_of(stack_id)), tid=tid, thread=name, pid=pid,
                             role=role, state=state, category=category, count=int(count)))
    rows.sort(key=lambda r: -r.count)
    return Stacks(tuple(frames), tuple(rows), profile.interval_s)
