"""The service as processes: one analysis per sampled process, each with its role.

The checks run per process (a lock, the GIL, an event loop belong to one process), and the
verdict is the service's (checks/service.py merges them).

Roles come from the work each process does, not from its place in the tree. A process does
request work when it has threads in request handling whose activity stands up to the OS
counters: threads waiting on a lock, a pool or the GIL inside request handling are request work
(a server whose handlers queue on one lock is rarely *busy*, yet it serves); threads the samples
call busy count only as far as /proc's CPU time confirms them (a thread asleep in a library's
completion queue can look busy in its frames). "Next to no CPU" is by /proc: under
QUIET_MAX_CORES, or under QUIET_SHARE of the busiest working process's cores.

- `single`: the only process sampled.
- `master`: a parent that does no request work and used next to no CPU (a gunicorn arbiter,
  uvicorn's multiprocess supervisor, a multiprocessing parent joining its children). Its waits
  are never contention and its findings never the verdict.
- `helper`: a child that does no request work and used next to no CPU while another process of
  the tree did request work (a metrics exporter, a load driver, a resource tracker), unless it
  runs the same program as a working sibling (an idle worker of a pool is still a worker); and
  multiprocessing's resource tracker / fork server, always.
- `worker`: every other process: a parent that serves requests is a worker whatever children it
  has.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from diagnose.classify.categories import Categorizer
from diagnose.collect.procfs import TreeRecord, as_seen_inside
from diagnose.collect.tree import HELPER_MARKERS
from diagnose.model.async_tasks import TaskRecording
from diagnose.classify.os_state import pooled_decisions
from diagnose.model.analysis import Analysis, analysis_of, classify_profile, stack_changes_by_process
from diagnose.model.counters import running_agreement
from diagnose.model.kernel_waits import kernel_view
from diagnose.model.os_summary import combine
from diagnose.model.profile import Profile
from diagnose.model.run_context import RunContext, RunTarget
from diagnose.model.vocab import BUSY, CONTENDED, IN_PROCESS_KINDS, SERVING_ROLES, ProcessRole

MASTER_MAX_BUSY_SHARE = 0.15  # without /proc: a process busier than this does work itself
QUIET_MAX_CORES = 0.05  # with /proc: "next to no CPU" for a master or a helper...
QUIET_SHARE = 0.1  # ...or this share of the busiest working process's cores
WAIT_WORK_SHARE = 0.05  # request-thread time in in-process waits (lock, pool, GIL) that is work


@dataclass
class ProcessView:
    pid: int | None
    ppid: int | None
    role: ProcessRole
    cmdline: list[str]
    analysis: Analysis
    appeared_s: float | None = None
    exited_s: float | None = None

    @property
    def busy_share(self) -> float:
        samples = self.analysis.samples
        total = float(samples["count"].sum())
        busy = samples[samples["state"].isin(BUSY)]["count"].sum()
        return float(busy) / total if total else 0.0

    @property
    def cpu_s(self) -> float | None:
        return self.analysis.os.cpu_s if self.analysis.os is not None else None

    @property
    def cpu_cores(self) -> float | None:
        os_ = self.analysis.os
        return os_.cpu_s / os_.window_s if os_ is not None and os_.window_s else None

    @property
    def does_request_work(self) -> bool:
        """Threads in request handling that wait inside the process (a lock, a pool, the GIL; two
        threads at least, one to wait and one to be waited on) or run as far as /proc's CPU time
        confirms."""
        req = self.analysis.request_samples()
        total = float(req["count"].sum())
        if not total:
            return False
        # A wait inside the process is a wait on another of its threads: one thread alone in
        # request handling has none to wait on (a pool's parent whose main thread waits on its
        # children's sentinels read as a lock wait from its line's text on CPython 3.13).
        if req["thread"].nunique() >= 2:
            waiting = float(req[req["state"].isin(CONTENDED)
                                & req["wait_kind"].isin(IN_PROCESS_KINDS)]["count"].sum())
            if waiting / total >= WAIT_WORK_SHARE:
                return True
        counters = running_agreement(self.analysis, req)
        return counters.agrees and counters.sampled_cores > 0

    def quiet(self, busiest_cores: float = 0.0) -> bool:
        """Next to no CPU, beside processes that kept `busiest_cores` busy: by /proc where it
        was read, else by the samples."""
        cores = self.cpu_cores
        if cores is not None:
            return cores < max(QUIET_MAX_CORES, QUIET_SHARE * busiest_cores)
        return self.busy_share < MASTER_MAX_BUSY_SHARE


@dataclass
class Service:
    combined: Analysis  # every thread of every process: flame graph, timeline, thread table
    processes: list[ProcessView]

    @property
    def multi(self) -> bool:
        return len(self.processes) > 1

    def workers(self) -> list[ProcessView]:
        return [p for p in self.processes if p.role in SERVING_ROLES]


def build_service(profile: Profile, categorizer: Categorizer, tree: TreeRecord | None = None,
                  run: RunContext | None = None,
                  native_profile: Profile | None = None,
                  task_recordings: Mapping[int, TaskRecording] | None = None) -> Service:
    """`tree`: the /proc TreeRecord of the window (None offline). `task_recordings`: each
    process's asyncio tasks read from its memory, by pid (`attach`; none offline)."""
    recordings = task_recordings or {}
    stacks = classify_profile(profile, categorizer, native_profile)
    pids = profile.pids
    # threads by the ids py-spy reports: the target's own, inside a container's pid namespace
    records = {pid: as_seen_inside(r) for pid, r in tree.records.items()} if tree is not None else {}
    if len(pids) <= 1:
        pid = pids[0] if pids else (tree.roots[0] if tree is not None else None)
        record = records.get(pid) if pid is not None else None
        if record is None and tree is not None and len(records) == 1:
            record = next(iter(records.values()))
        kernel = kernel_view(record, tree)
        decided = (pooled_decisions({pid: kernel}, stack_changes_by_process(profile), leaves(profile),
                                    profile.interval_s or 0.01)
                   if kernel is not None and pid is not None else None)
        analysis = analysis_of(profile, stacks, record, run, native=native_profile,
                               kernel=kernel, decided=decided)
        analysis.tasks = recordings.get(pid) if pid is not None else None
        if analysis.tasks is None and pid is None and len(recordings) == 1:
            analysis.tasks = next(iter(recordings.values()))
        view = ProcessView(pid, tree.parents.get(pid) if tree is not None and pid is not None else None,
                           ProcessRole.SINGLE,
                           _cmdline(tree, pid, run), analysis)
        _lifetime(view, tree)
        return Service(analysis, [view])
    kernels = {pid: k for pid in pids if (k := kernel_view(records.get(pid), tree)) is not None}
    decided = (pooled_decisions(kernels, stack_changes_by_process(profile), leaves(profile),
                                profile.interval_s or 0.01)
               if kernels else None)
    views = []
    for pid in pids:
        record = records.get(pid)
        native = native_profile.of_process(pid) if native_profile is not None else None
        analysis = analysis_of(profile.of_process(pid), stacks, record, run, native=native,
                               kernel=kernels.get(pid), decided=decided)
        analysis.tasks = recordings.get(pid)
        view = ProcessView(pid, tree.parents.get(pid) if tree is not None else None, ProcessRole.WORKER,
                           _cmdline(tree, pid, run), analysis)
        _lifetime(view, tree)
        views.append(view)
    assign_roles(views)
    for view in views:
        view.analysis.process_role = view.role
    summaries = [v.analysis.os for v in views if v.analysis.os is not None]
    combined = analysis_of(profile, stacks, None, run, combine(summaries) if summaries else None)
    return Service(combined, views)


def leaves(profile: Profile) -> dict[int, int]:
    """Stack id -> its innermost Python frame id (-1 when it has none): the line a thread was at."""
    out = {}
    for sid, stack in enumerate(profile.stacks):
        out[sid] = next((f for f in reversed(stack) if not profile.frames[f].native), -1)
    return out


def _cmdline(tree: TreeRecord | None, pid: int | None, run: RunContext | None) -> list[str]:
    if tree is not None and pid in tree.cmdlines and tree.cmdlines[pid]:
        return list(tree.cmdlines[pid])
    target = run.target if run is not None else RunTarget()
    return list(target.cmdline) if target.pid == pid else []


def _lifetime(view: ProcessView, tree: TreeRecord | None) -> None:
    if tree is None or view.pid not in tree.records:
        return
    record = tree.records[view.pid]
    view.appeared_s = tree.appeared_s.get(view.pid)
    if record.target_exited and record.state_samples:
        view.exited_s = float(record.state_samples[-1][0])


def _ancestors(pid: int | None, parents: dict[int | None, int | None]) -> set[int]:
    seen: set[int] = set()
    while pid in parents:
        parent = parents[pid]
        if parent is None or parent in seen:
            break
        pid = parent
        seen.add(parent)
    return seen


def assign_roles(views: list[ProcessView]) -> None:
    """Roles from the work each process does (see the module docstring)."""
    parents = {v.pid: v.ppid for v in views}
    pids = set(parents)
    has_descendants = set()
    for v in views:
        has_descendants |= _ancestors(v.pid, parents)
    working = {v.pid for v in views if v.does_request_work}
    busiest = max((v.cpu_cores or 0.0 for v in views if v.pid in working), default=0.0)
    for v in views:
        text = " ".join(v.cmdline)
        idle = v.pid not in working and v.quiet(busiest)
        if any(marker in text for marker in HELPER_MARKERS):
            v.role = ProcessRole.HELPER
        elif v.pid in has_descendants:
            v.role = ProcessRole.MASTER if idle else ProcessRole.WORKER
        elif idle and v.ppid in pids and working and not _twin_of_working_sibling(v, views, working):
            v.role = ProcessRole.HELPER
        else:
            v.role = ProcessRole.WORKER


def _twin_of_working_sibling(view: ProcessView, views: list[ProcessView], working: set[int | None]) -> bool:
    """A child running the same program as a working child of the same parent is a worker that
    got no request this window (a pool's idle worker), not a helper."""
    return any(o.pid in working and o.pid != view.pid and o.ppid == view.ppid
               and o.cmdline == view.cmdline for o in views)


def worker_load(views: list[ProcessView]) -> np.ndarray:
    """CPU cores each worker kept busy over the window (from /proc), NaN where unknown."""
    return np.array([v.cpu_cores if v.cpu_cores is not None else np.nan for v in views], dtype=float)
