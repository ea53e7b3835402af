"""The service as processes: one analysis per sampled process, each with its role.

The checks run per process (a lock, the GIL, an event loop belong to one process), and the
verdict is the service's (checks/service.py merges them). Roles:

- `single`: the only process sampled.
- `master`: a process whose sampled Python descendants do the work while it waits (a gunicorn
  arbiter, uvicorn's multiprocess supervisor, a multiprocessing parent). Its waits are never
  contention and its findings never the verdict.
- `helper`: multiprocessing's resource tracker / fork server: never request work.
- `worker`: every other process (a parent that does real work itself counts as a worker).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from diagnose.collect.tree import HELPER_MARKERS
from diagnose.model.analysis import Analysis, analysis_of, classify_profile
from diagnose.model.os_summary import combine
from diagnose.model.profile import Profile

MASTER_MAX_BUSY_SHARE = 0.15  # a parent busier than this does work itself: it is a worker
MASTER_MAX_CORES = 0.03  # ...unless the OS says it used next to no CPU


@dataclass
class ProcessView:
    pid: int | None
    ppid: int | None
    role: str
    cmdline: list[str]
    analysis: Analysis
    appeared_s: float | None = None
    exited_s: float | None = None

    @property
    def busy_share(self) -> float:
        samples = self.analysis.samples
        total = float(samples["count"].sum())
        busy = samples[samples["state"].isin(("python", "native", "gil"))]["count"].sum()
        return float(busy) / total if total else 0.0

    @property
    def cpu_s(self) -> float | None:
        return self.analysis.os.cpu_s if self.analysis.os is not None else None

    @property
    def cpu_cores(self) -> float | None:
        os_ = self.analysis.os
        return os_.cpu_s / os_.window_s if os_ is not None and os_.window_s else None


@dataclass
class Service:
    combined: Analysis  # every thread of every process: flame graph, timeline, thread table
    processes: list[ProcessView]

    @property
    def multi(self) -> bool:
        return len(self.processes) > 1

    def workers(self) -> list[ProcessView]:
        return [p for p in self.processes if p.role in ("worker", "single")]


def build_service(profile: Profile, categorizer, tree=None, meta: dict | None = None,
                  native_profile: Profile | None = None) -> Service:
    """`tree`: the /proc TreeRecord of the window (None offline)."""
    stacks = classify_profile(profile, categorizer, native_profile)
    pids = profile.pids
    records = tree.records if tree is not None else {}
    if len(pids) <= 1:
        pid = pids[0] if pids else (tree.roots[0] if tree is not None else None)
        record = records.get(pid) if pid is not None else None
        if record is None and tree is not None and len(records) == 1:
            record = next(iter(records.values()))
        analysis = analysis_of(profile, stacks, record, meta, native=native_profile)
        view = ProcessView(pid, tree.parents.get(pid) if tree is not None else None, "single",
                           _cmdline(tree, pid, meta), analysis)
        _lifetime(view, tree)
        return Service(analysis, [view])
    views = []
    for pid in pids:
        record = records.get(pid)
        native = native_profile.of_process(pid) if native_profile is not None else None
        analysis = analysis_of(profile.of_process(pid), stacks, record, meta, native=native)
        view = ProcessView(pid, tree.parents.get(pid) if tree is not None else None, "worker",
                           _cmdline(tree, pid, meta), analysis)
        _lifetime(view, tree)
        views.append(view)
    assign_roles(views)
    for view in views:
        view.analysis.process_role = view.role
    summaries = [v.analysis.os for v in views if v.analysis.os is not None]
    combined = analysis_of(profile, stacks, None, meta, combine(summaries) if summaries else None)
    return Service(combined, views)


def _cmdline(tree, pid, meta) -> list[str]:
    if tree is not None and pid in tree.cmdlines and tree.cmdlines[pid]:
        return list(tree.cmdlines[pid])
    target = (meta or {}).get("target", {})
    return list(target.get("cmdline") or []) if target.get("pid") == pid else []


def _lifetime(view: ProcessView, tree) -> None:
    if tree is None or view.pid not in tree.records:
        return
    record = tree.records[view.pid]
    view.appeared_s = tree.appeared_s.get(view.pid)
    if record.target_exited and record.state_samples:
        view.exited_s = float(record.state_samples[-1][0])


def _ancestors(pid: int, parents: dict) -> set[int]:
    seen = set()
    while pid in parents and parents[pid] is not None and parents[pid] not in seen:
        pid = parents[pid]
        seen.add(pid)
    return seen


def assign_roles(views: list[ProcessView]) -> None:
    parents = {v.pid: v.ppid for v in views}
    has_descendants = set()
    for v in views:
        has_descendants |= _ancestors(v.pid, parents)
    for v in views:
        text = " ".join(v.cmdline)
        if any(marker in text for marker in HELPER_MARKERS):
            v.role = "helper"
        elif v.pid in has_descendants and (
                v.busy_share < MASTER_MAX_BUSY_SHARE
                # the OS's word: a parent that used next to no CPU did no request work
                or (v.cpu_cores is not None and v.cpu_cores < MASTER_MAX_CORES)):
            v.role = "master"
        else:
            v.role = "worker"


def worker_load(views: list[ProcessView]) -> np.ndarray:
    """CPU cores each worker kept busy over the window (from /proc), NaN where unknown."""
    return np.array([v.cpu_cores if v.cpu_cores is not None else np.nan for v in views], dtype=float)
