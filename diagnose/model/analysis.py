"""Everything the checks read: the sample table, per-thread summary and OS numbers."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import pandas as pd

from diagnose.classify.categories import Categorizer
from diagnose.classify.state import STATES
from diagnose.collect.procfs import ProcRecord
from diagnose.model.os_summary import ProcessOS, summarize
from diagnose.model.profile import Profile
from diagnose.model.table import StackTable, build_sample_table, classify_stacks

ACTIVE_STATES = ("python", "native", "gil", "lock")
REQUEST_ACTIVE_SHARE = 0.2  # a thread busy or blocked this often is handling requests...
PARKED_SHARE = 0.97  # ...unless it sat in one and the same stack nearly all window long: a main
# thread parked in join()/Event.wait() is not serving requests, while even a thread in a heavy
# lock convoy gets the lock and runs now and then.
IDLE_SHARE = 0.5


@dataclass
class Analysis:
    profile: Profile
    stacks: StackTable
    samples: pd.DataFrame
    threads: pd.DataFrame  # index: thread index; tid, name, role, samples, one column per state
    os: ProcessOS | None
    meta: dict = field(default_factory=dict)  # target and sampling facts

    @property
    def request_threads(self) -> pd.DataFrame:
        return self.threads[self.threads["role"] == "request"]

    def request_samples(self) -> pd.DataFrame:
        return self.samples[self.samples["thread"].isin(self.request_threads.index)]

    def frame(self, frame_id: int):
        return self.profile.frames[frame_id]

    @functools.cached_property
    def waits(self):
        """The ranked wait-site table with holders (computed once, read by several checks)."""
        from diagnose.model.waits import wait_sites
        return wait_sites(self)


def summarize_threads(profile: Profile, samples: pd.DataFrame) -> pd.DataFrame:
    counts = (samples.groupby(["thread", "state"], observed=False)["count"].sum()
              .unstack(fill_value=0).reindex(columns=list(STATES), fill_value=0))
    counts = counts.reindex(range(len(profile.threads)), fill_value=0)
    total = counts.sum(axis=1)
    active = counts[list(ACTIVE_STATES)].sum(axis=1)
    has_python = samples.groupby("thread")["site"].max().reindex(counts.index, fill_value=-1) >= 0
    has_python |= samples.assign(py=samples["state"] == "python").groupby("thread")["py"].any() \
        .reindex(counts.index, fill_value=False)
    role = pd.Series("other", index=counts.index)
    safe_total = total.where(total > 0, 1)
    role[(counts["idle"] / safe_total) >= IDLE_SHARE] = "idle"
    per_stack = samples.groupby(["thread", "stack"])["count"].sum()
    dominant = per_stack.groupby(level=0).max().reindex(counts.index, fill_value=0)
    parked = (dominant / safe_total) >= PARKED_SHARE
    role[((active / safe_total) >= REQUEST_ACTIVE_SHARE) & ~parked & has_python] = "request"
    out = pd.DataFrame({
        "tid": [t.tid for t in profile.threads],
        "name": [t.name for t in profile.threads],
        "role": role.values,
        "samples": total.values,
    }, index=counts.index)
    return pd.concat([out, counts], axis=1)


def analyze_profile(profile: Profile, categorizer: Categorizer, proc: ProcRecord | None = None,
                    meta: dict | None = None) -> Analysis:
    stacks = classify_stacks(profile, categorizer)
    samples = build_sample_table(profile, stacks)
    threads = summarize_threads(profile, samples)
    return Analysis(profile, stacks, samples, threads, summarize(proc) if proc else None, meta or {})
