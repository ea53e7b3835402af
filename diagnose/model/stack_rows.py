"""The samples as a table of distinct stacks (the report's `Stacks`): what `diagnose export`
(pprof), `diagnose diff` (differential flame graph) and `--push` need from a report without its
recording: the frames, one row per distinct stack with its thread, state, leaf category and
count (`stack`: frame indices, root first), and the seconds each sample stands for.

Rows are the sample table grouped by (stack, thread, state, leaf category): a sample of a
calibrated stack whose state is a mix counts once per state it was given.

A recording of hundreds of thousands of distinct stacks (most of them seen once or twice) keeps
its heaviest MAX_STACK_ROWS rows; the others are folded, per thread, state and category, into
one row whose stack is the single frame FOLDED_FUNCTION, so every total (per thread, state,
category) still adds up. The speedscope output carries every stack; `Folding` says what was
folded, for the report's notes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from diagnose.model.analysis import Analysis
from diagnose.report.model import StackFrame, StackRow, Stacks

# Rows the report carries (the page embeds the report: a few MB at most). Far above what a
# service's recording of minutes has; a recording past it is mostly stacks seen once or twice.
MAX_STACK_ROWS = 20_000
# The folded rows' frame: the same name in every report, so `diagnose diff` lines them up.
FOLDED_FUNCTION = "(rarer stacks, folded)"


@dataclass(frozen=True)
class Folding:
    """What the stack table left out: `rows` (stack, thread, state, category) rows holding
    `samples` of `total` samples, folded into `folded_rows` rows of FOLDED_FUNCTION."""

    rows: int
    samples: int
    total: int
    folded_rows: int
    kept_rows: int

    def note(self) -> str:
        share = 100 * self.samples / self.total if self.total else 0.0
        return (f"the report's stack table carries the {self.kept_rows:,} heaviest of "
                f"{self.kept_rows + self.rows:,} distinct (stack, thread, state, category) rows; "
                f"the other {self.rows:,} ({self.samples:,} samples, {share:.1f}%) are folded per "
                f"thread, state and category into {self.folded_rows:,} rows named "
                f"'{FOLDED_FUNCTION}' (the .speedscope.json file has every stack)")


def stack_rows(analysis: Analysis) -> tuple[Stacks, Folding | None]:
    """The table (kept rows heaviest first, then the folded ones), and what was folded (None
    when every row is kept)."""
    profile = analysis.profile
    samples = analysis.samples
    if not len(samples):
        return Stacks((), (), profile.interval_s), None
    grouped, rest, folded = _grouped(samples)
    # The thread facts of every row, looked up once per thread (not once per row).
    threads = analysis.threads
    facts = {int(index): (int(tid), str(name), None if pd.isna(pid) else int(pid), str(role))
             for index, tid, name, pid, role in zip(threads.index, threads["tid"], threads["name"],
                                                    threads["pid"], threads["role"])}
    # Each kept stack's path in the report's frame list (frames numbered as they first appear,
    # stacks in id order), built once per stack without a Python walk of its frames.
    used, paths = profile.numbered_paths(grouped["stack"].to_numpy())
    frames = tuple(StackFrame(frame.function, frame.file, int(frame.line), bool(frame.native))
                   for frame in map(profile.frames.__getitem__, used))
    rows = _rows(grouped, [tuple(paths[stack_id]) for stack_id in grouped["stack"].tolist()], facts)
    folding = None
    if len(rest):
        folded_frame = len(frames)
        frames += (StackFrame(FOLDED_FUNCTION),)
        rows += _rows(folded, [(folded_frame,)] * len(folded), facts)
        folding = Folding(rows=len(rest), samples=int(rest["count"].sum()),
                          total=int(samples["count"].sum()), folded_rows=len(folded),
                          kept_rows=len(grouped))
    return Stacks(frames, tuple(rows), profile.interval_s), folding


def row_threads(analysis: Analysis) -> tuple[int, ...]:
    """The thread index (in `analysis.threads`, the report's `threads`) of each row of
    `stack_rows(analysis)`, in its order: the kept rows, then the folded ones."""
    if not len(analysis.samples):
        return ()
    grouped, _, folded = _grouped(analysis.samples)
    return tuple(int(t) for t in (*grouped["thread"].tolist(), *folded["thread"].tolist()))


def _grouped(samples: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The (stack, thread, state, leaf category) rows kept (heaviest first), those past
    MAX_STACK_ROWS, and those folded per (thread, state, category)."""
    grouped = (samples.groupby(["stack", "thread", "state", "leaf_category"], observed=True)["count"]
               .sum().reset_index())
    grouped = grouped[grouped["count"] > 0]
    # Heaviest first (a stable sort: rows of equal count keep the grouping's order).
    grouped = grouped.iloc[np.argsort(-grouped["count"].to_numpy(), kind="stable")]
    rest = grouped.iloc[MAX_STACK_ROWS:]
    grouped = grouped.iloc[:MAX_STACK_ROWS]
    # per (thread, state, category), in the order the heaviest-first walk meets them
    folded = (rest.groupby(["thread", "state", "leaf_category"], observed=True, sort=False)["count"]
              .sum().reset_index())
    return grouped, rest, folded


def _rows(table: pd.DataFrame, stacks: list[tuple[int, ...]],
          facts: dict[int, tuple[int, str, int | None, str]]) -> list[StackRow]:
    """The report's rows of a grouped table (thread, state, leaf_category, count), each with its
    stack path and its thread's facts (tid, name, pid, role)."""
    return [StackRow(stack=stack, tid=fact[0], thread=fact[1], pid=fact[2], role=fact[3],
                     state=state, category=category, count=count)
            for stack, fact, state, category, count in zip(
                stacks, map(facts.__getitem__, table["thread"].tolist()),
                table["state"].astype(str).tolist(), table["leaf_category"].astype(str).tolist(),
                table["count"].astype("int64").tolist())]
