"""What only the report page draws, carried in the report so that `diagnose render` rebuilds the
page from a saved `.json` (docs/report-data.md, "The page's own tables"): the flame graph's
colours and thread of each stack row, the timeline, and when the report was generated.

Indices, not names, to keep the file small: a frame's category indexes `categories`, a run's
state and a stack row's thread index the states of `vocabulary.states` (model/vocab.STATES) and
`Report.threads`, as the page reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimelineLane:
    """One thread's lane: runs of equal state, `(state index or -1 for no sample, steps)`."""

    thread: int
    runs: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Timeline:
    """Each thread's state over the window, in `steps` steps of `interval_s` seconds."""

    interval_s: float = 0.0
    steps: int = 0
    lanes: tuple[TimelineLane, ...] = ()


@dataclass(frozen=True)
class Page:
    """The page's own tables, beside the report's (`Report.page`; absent in reports written
    before it)."""

    # "2026-11-29T18:15:00Z": when the report was written (the page's footer)
    generated_at: str = ""
    # the names `frame_categories` index (classify/categories.CATEGORIES when written)
    categories: tuple[str, ...] = ()
    # per `Report.stacks.frames` entry: its category, by the user's rules when given
    frame_categories: tuple[int, ...] = ()
    # per `Report.stacks.samples` row: its thread's index in `Report.threads`
    stack_threads: tuple[int, ...] = ()
    timeline: Timeline = Timeline()
