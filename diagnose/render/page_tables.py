"""The report's `page` (report/model/page.py): what the page draws beyond the report's own
tables, made from the analysis while it is at hand, so that the page is later rendered from the
report alone (`diagnose render`, docs/report-data.md).

The flame graph draws the report's `stacks` table; this adds each frame's category (by the
rules of the run, `--rules` included) and each row's thread index. The timeline is each
thread's state over the window, run-length encoded.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timezone

import numpy as np
import pandas as pd

from diagnose.classify.categories import CATEGORIES, Categorizer, names_qualified
from diagnose.model.analysis import Analysis
from diagnose.samples.profile import Frame
from diagnose.model.runs import bins_of_rows, last_instants, thread_steps
from diagnose.model.stack_rows import row_threads
from diagnose.report.model import Report, Stacks, Thread
from diagnose.report.model.page import Page, Timeline, TimelineLane

MAX_TIMELINE_STEPS = 3000  # enough resolution for a screen; longer windows are coarsened

# The note a page rendered from a report without `page` shows (sampling.notes).
EARLIER_REPORT_NOTE = (
    "rendered from a report written before reports carried the page's own tables: no timeline, "
    "frame categories by the built-in rules; analyze its .speedscope.json again (or attach "
    "again) for the whole page")


def with_page(report: Report, analysis: Analysis, categorizer: Categorizer,
              generated_at: str | None = None) -> Report:
    """`report` carrying its page's tables; `generated_at` (UTC, ISO 8601) defaults to now."""
    if generated_at is None:
        generated_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return replace(report, page=Page(
        generated_at=generated_at,
        categories=tuple(CATEGORIES),
        frame_categories=frame_categories(report.stacks, categorizer),
        stack_threads=stack_threads(report, analysis),
        timeline=timeline(analysis)))


def earlier_page(report: Report) -> Report:
    """A report written before `page` existed, with what can be read off it: frame categories by
    the built-in rules, each row's thread found by its facts, no timeline, and a note saying so.
    A report that has its page is returned as it is."""
    if report.page is not None:
        return report
    found = _thread_index(report.threads)
    page = Page(categories=tuple(CATEGORIES),
                frame_categories=frame_categories(report.stacks, Categorizer(None)),
                stack_threads=tuple(found.get((r.tid, r.thread, r.pid, r.role), [-1])[0]
                                    for r in report.stacks.samples))
    sampling = replace(report.sampling, notes=(*report.sampling.notes, EARLIER_REPORT_NOTE))
    return replace(report, page=page, sampling=sampling)


def frame_categories(stacks: Stacks, categorizer: Categorizer) -> tuple[int, ...]:
    """Each frame's category, as an index in CATEGORIES."""
    index = {name: i for i, name in enumerate(CATEGORIES)}
    frames = [Frame(f.function, f.file, f.line, f.native) for f in stacks.frames]
    qualified = names_qualified(frames)
    return tuple(index[categorizer.categorize(frame, qualified).category] for frame in frames)


def _thread_index(threads: tuple[Thread, ...]) -> dict[tuple, list[int]]:
    """The thread indices of each (tid, name, pid, role), as a stack row names its thread."""
    found: dict[tuple, list[int]] = defaultdict(list)
    for i, t in enumerate(threads):
        found[(t.tid, t.name, t.pid, t.role)].append(i)
    return found


def stack_threads(report: Report, analysis: Analysis) -> tuple[int, ...]:
    """Each stack row's thread index: read off the thread's facts the row carries when they name
    one thread each (always, but for threads of one process sharing id, name and role), else
    from the rows' own grouping."""
    found = _thread_index(report.threads)
    if all(len(v) == 1 for v in found.values()):
        try:
            return tuple(found[(r.tid, r.thread, r.pid, r.role)][0] for r in report.stacks.samples)
        except KeyError:
            pass
    return row_threads(analysis)


def timeline(analysis: Analysis) -> Timeline:
    samples = analysis.samples
    timed = samples[samples["t"].notna()]
    if timed.empty:
        return Timeline(interval_s=analysis.profile.interval_s, steps=0, lanes=())
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
    for lane_thread, group in frame.groupby("thread", sort=True):
        lane = np.full(steps, -1, dtype=np.int64)
        lane[group["step"].to_numpy()] = group["state"].to_numpy()
        change = np.flatnonzero(np.diff(lane)) + 1
        starts = np.concatenate(([0], change))
        lengths = np.diff(np.concatenate((starts, [steps])))
        lanes.append(TimelineLane(thread=int(lane_thread),
                                  runs=tuple((int(lane[s]), int(n))
                                             for s, n in zip(starts, lengths))))
    return Timeline(interval_s=round(interval, 6), steps=steps, lanes=tuple(lanes))
