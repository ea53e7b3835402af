"""The service as processes: one analysis per sampled process, each with its role.

The checks run per process (a lock, the GIL, an event loop belong to one process), and the
verdict is the service's (checks/service_verdict.py merges them).

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
  runs the same program as a working sibling (an idle worker of a pool is still a worker); a
  child whose only request work is running a little on its own (no two of its threads wait on
  each other) at next to no CPU beside another working process is one too (a housekeeping loop
  woken by a timer); and multiprocessing's resource tracker / fork server, always.
- `worker`: every other process: a parent that serves requests is a worker whatever children it
  has.

The fleet (`fleet`) is the workers that share the load as peers: siblings running one program.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from diagnose.classify.categories import Categorizer
from diagnose.collect.procfs import TreeRecord, as_seen_inside
from diagnose.collect.tree import HELPER_MARKERS
from diagnose.collect.task_recording import TaskRecording
from diagnose.model.os_state import pooled_decisions
from diagnose.model.analysis import (Analysis, analysis_of, classify_profile, lock_taking_stacks,
                                     stack_changes_by_process)
from diagnose.model.counters import running_agreement
from diagnose.model.children import child_processes
from diagnose.model.cores_held import cores_held
from diagnose.model.kernel_waits import kernel_view
from diagnose.model.os_summary import combine
from diagnose.samples.profile import Profile
from diagnose.collect.run_context import RunContext
from diagnose.model.servers import server_processes
from diagnose.vocab import BUSY, CONTENDED, IN_PROCESS_KINDS, SERVING_ROLES, ProcessRole

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
        """Threads in request handling that wait on each other inside the process
        (`request_threads_wait`) or run as far as /proc's CPU time confirms."""
        return self.request_threads_wait or self.request_threads_run

    @property
    def request_threads_wait(self) -> bool:
        """Request threads wait inside the process (a lock, a pool, the GIL) for a share of their
        time: two threads at least, one to wait and one to be waited on."""
        req = self.analysis.request_samples()
        total = float(req["count"].sum())
        # A wait inside the process is a wait on another of its threads: one thread alone in
        # request handling has none to wait on (a pool's parent whose main thread waits on its
        # children's sentinels read as a lock wait from its line's text on CPython 3.13).
        if not total or req["thread"].nunique() < 2:
            return False
        waiting = float(req[req["state"].isin(CONTENDED)
                            & req["wait_kind"].isin(IN_PROCESS_KINDS)]["count"].sum())
        return waiting / total >= WAIT_WORK_SHARE

    @property
    def request_threads_run(self) -> bool:
        """Request threads run, as far as /proc's CPU time confirms the samples."""
        req = self.analysis.request_samples()
        if not float(req["count"].sum()):
            return False
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
    # CPU of the descendants not sampled (not running Python), their reaped children's too, over
    # the window (other_children_s); None without a /proc record that read them.
    other_children_s: float | None = None

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
    servers = server_processes(tree)
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
                                    profile.interval_s or 0.01, lock_taking_stacks(profile, stacks))
                   if kernel is not None and pid is not None else None)
        analysis = analysis_of(profile, stacks, record, run, native=native_profile,
                               kernel=kernel, decided=decided)
        analysis.tasks = recordings.get(pid) if pid is not None else None
        analysis.servers = servers
        analysis.children = child_processes(tree, pid)
        analysis.cores_held = cores_held(tree, analysis.os, run)
        if analysis.tasks is None and pid is None and len(recordings) == 1:
            analysis.tasks = next(iter(recordings.values()))
        view = ProcessView(pid, tree.parents.get(pid) if tree is not None and pid is not None else None,
                           ProcessRole.SINGLE,
                           _cmdline(tree, pid, run), analysis)
        _lifetime(view, tree)
        return Service(analysis, [view], other_children_s(tree))
    kernels = {pid: k for pid in pids if (k := kernel_view(records.get(pid), tree)) is not None}
    decided = (pooled_decisions(kernels, stack_changes_by_process(profile), leaves(profile),
                                profile.interval_s or 0.01, lock_taking_stacks(profile, stacks))
               if kernels else None)
    views = []
    for pid in pids:
        record = records.get(pid)
        native = native_profile.of_process(pid) if native_profile is not None else None
        analysis = analysis_of(profile.of_process(pid), stacks, record, run, native=native,
                               kernel=kernels.get(pid), decided=decided)
        analysis.tasks = recordings.get(pid)
        analysis.servers = servers
        analysis.children = child_processes(tree, pid)
        view = ProcessView(pid, tree.parents.get(pid) if tree is not None else None, ProcessRole.WORKER,
                           _cmdline(tree, pid, run), analysis)
        _lifetime(view, tree)
        views.append(view)
    # a followed peer (attach --follow-peers) and its own children serve the service, not of it
    followed = set(tree.followed) if tree is not None else set()
    parents = {v.pid: v.ppid for v in views}
    peers = {v.pid for v in views if v.pid in followed or _ancestors(v.pid, parents) & followed}
    assign_roles([v for v in views if v.pid not in peers])
    for view in views:
        if view.pid in peers:
            view.role = ProcessRole.PEER
    for view in views:
        view.analysis.process_role = view.role
    summaries = [v.analysis.os for v in views if v.analysis.os is not None]
    combined = analysis_of(profile, stacks, None, run, combine(summaries) if summaries else None)
    combined.servers = servers
    # the machine's cores by holder, the service's own taken together: each process's check
    # reads the same (a worker's siblings are the service, not its neighbours)
    combined.cores_held = cores_held(tree, combined.os, run)
    for view in views:
        view.analysis.cores_held = combined.cores_held
    return Service(combined, views, other_children_s(tree))


def other_children_s(tree: TreeRecord | None) -> float | None:
    """The CPU the descendants not sampled ran over the window (collect/procfs.py
    TreeRecord.other_children): from first sight (0 for one started in the window) to the
    window's end; one gone by then is in its parent's reaped children. None for a recording
    that did not read them (no process-level counters)."""
    if tree is None or not any(r.process_cpu for r in tree.records.values()):
        return None
    return sum(max(0.0, last - (first or 0.0)) for _ppid, first, last in tree.other_children.values()
               if last is not None)


def leaves(profile: Profile) -> dict[int, int]:
    """Stack id -> its innermost Python frame id (-1 when it has none): the line a thread was at."""
    out = {}
    for sid, stack in enumerate(profile.stacks):
        out[sid] = next((f for f in reversed(stack) if not profile.frames[f].native), -1)
    return out


def _cmdline(tree: TreeRecord | None, pid: int | None, run: RunContext | None) -> list[str]:
    if tree is not None and pid in tree.cmdlines and tree.cmdlines[pid]:
        return list(tree.cmdlines[pid])
    return list(run.argv) if run is not None and run.target.pid == pid else []


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
        elif ((idle or _periodic(v, views, working)) and v.ppid in pids and working
              and not _twin_of_working_sibling(v, views, working)):
            v.role = ProcessRole.HELPER
        else:
            v.role = ProcessRole.WORKER


def _periodic(view: ProcessView, views: list[ProcessView], working: set[int | None]) -> bool:
    """Its only request work is a little running of its own, at next to no CPU beside another
    working process: a loop a timer wakes (housekeeping, a metrics flush), which the thread
    heuristics call a request thread (busy now and then, parked in between), serves no request.
    A server whose threads wait on each other is never one, however little it ran."""
    others = max((o.cpu_cores or 0.0 for o in views if o.pid in working and o.pid != view.pid),
                 default=0.0)
    return (view.pid in working and others > 0 and view.cpu_cores is not None
            and not view.request_threads_wait and view.quiet(others))


def _twin_of_working_sibling(view: ProcessView, views: list[ProcessView], working: set[int | None]) -> bool:
    """A child running the same program as a working child of the same parent is a worker that
    got no request this window (a pool's idle worker), not a helper."""
    return any(o.pid in working and o.pid != view.pid and _peers(o, view) for o in views)


_NUMBER = re.compile(r"\d+")


def program_of(cmdline: Sequence[str]) -> tuple[str, ...]:
    """A command line with its numbers masked: the workers of one fleet run one program and
    differ at most in numbers (a spawned worker's `pipe_handle=7`, an index, a port)."""
    return tuple(_NUMBER.sub("#", part) for part in cmdline)


def _peers(a: ProcessView, b: ProcessView) -> bool:
    """Siblings running one program: workers of one fleet (a pre-fork server's, a pool's)."""
    return a.ppid == b.ppid and program_of(a.cmdline) == program_of(b.cmdline)


def fleet(processes: Sequence[ProcessView]) -> tuple[ProcessView, ...]:
    """The worker processes that share the load as peers: the largest group of siblings running
    one program, one of them at least serving requests (its idle peers got no request this
    window: that is the imbalance). Never a process and its own child: a server's helper (an
    exporter, a housekeeping loop) shares none of its load, whatever CPU it used. A lone worker
    is a fleet under a supervisor (`gunicorn -w 1`: its count is a knob), not beside its helpers.
    Empty when there is none."""
    workers = [v for v in processes if v.role == ProcessRole.WORKER]
    masters = {v.pid for v in processes if v.role == ProcessRole.MASTER}
    groups: list[list[ProcessView]] = []
    for view in workers:
        group = next((g for g in groups if _peers(g[0], view)), None)
        if group is None:
            groups.append([view])
        else:
            group.append(view)
    fleets = [g for g in groups if any(v.does_request_work for v in g)
              and (len(g) >= 2 or _supervised(g[0], masters))]
    best = max(fleets, key=lambda g: (len(g), sum(v.cpu_cores or 0.0 for v in g)), default=[])
    return tuple(best)


def _supervised(view: ProcessView, masters: set[int | None]) -> bool:
    """Its parent is the tree's master; without a tree (no parents known), any master."""
    return view.ppid in masters if view.ppid is not None else bool(masters)


def worker_load(views: list[ProcessView]) -> np.ndarray:
    """CPU cores each worker kept busy over the window (from /proc), NaN where unknown."""
    return np.array([v.cpu_cores if v.cpu_cores is not None else np.nan for v in views], dtype=float)
