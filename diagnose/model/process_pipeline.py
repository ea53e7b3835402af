"""Pipelines across processes: a consumer process fed by worker processes.

A torch DataLoader, a `multiprocessing.Pool` or a `ProcessPoolExecutor` feeding a model loop is
two stages in different processes: the workers (the producer stage, one process each) run the
transform; the parent takes results from a multiprocessing queue / pipe / result object and runs
the model. Recognised by what the threads loop on, never by names the app chose:

- a producer is a process whose busiest thread runs a library's worker loop (torch's
  `_worker_loop`, `multiprocessing.pool.worker`, `concurrent.futures.process._process_worker`);
- its consumer is the parent process, whose thread waiting on the workers' results
  (a `multiprocessing` queue `get`, `Connection.recv` / `poll`, a pool's `AsyncResult.get` /
  `IMapIterator.next`, a `Future.result` of a process pool) is the consumer stage.

Utilization law: the producer stage serves at most N / (time per item); the consumer, starved
while it waits for the next result, is held back by it. The stage's CPU comes from /proc (OS
counters outrank samples); the transform is the hottest user function under the worker loop.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from diagnose import vocab
from diagnose.model.analysis import Analysis
from diagnose.model.counters import unpaused_window_s
from diagnose.samples.profile import Frame, frame_is
from diagnose.model.service import ProcessView, Service
from diagnose.report.model.findings import Site

BUSY = vocab.BUSY


class Framework(enum.Enum):
    DATALOADER = "torch DataLoader"
    POOL = "multiprocessing.Pool"
    PROCESS_POOL = "ProcessPoolExecutor"


# (file suffix, function pattern, framework): the library loop a worker process runs.
WORKER_LOOPS = (
    ("torch/utils/data/_utils/worker.py", re.compile(r"(^|\.)_worker_loop$"), Framework.DATALOADER),
    ("multiprocessing/pool.py", re.compile(r"(^|\.)worker$"), Framework.POOL),
    ("concurrent/futures/process.py", re.compile(r"(^|\.)_process_worker$"), Framework.PROCESS_POOL),
)
# Where a consumer waits for its workers' results.
RESULT_WAITS = (
    ("multiprocessing/queues.py", re.compile(r"(^|\.)get$")),
    ("multiprocessing/connection.py", re.compile(r"(recv|recv_bytes|poll|_poll|wait)$")),
    ("multiprocessing/pool.py", re.compile(r"(ApplyResult\.get|ApplyResult\.wait|"
                                           r"IMapIterator\.next|^get$|^next$)")),
    ("concurrent/futures/_base.py", re.compile(r"(^|\.)(result|as_completed|wait)$")),
)
# Library code between a worker loop and the user's transform, or above a consumer's wait.
_LIBRARY = ("torch/utils/data/", "multiprocessing/", "concurrent/futures/", "threading.py",
            "selectors.py", "queue.py", "torch/nn/", "torch/_", "site-packages/torch/")
KNOBS = {Framework.DATALOADER: ("num_workers", "DataLoader(..., num_workers={n})"),
         Framework.POOL: ("processes", "Pool(processes={n})"),
         Framework.PROCESS_POOL: ("max_workers", "ProcessPoolExecutor(max_workers={n})")}


@dataclass(frozen=True)
class ProcessPipeline:
    framework: Framework
    consumer_pid: int
    consumer_thread: str
    consumer_site: Site | None  # where the consumer asks for the next result
    consumer_busy: float  # share of the consumer thread's samples running or runnable
    consumer_starved: float  # share waiting for the workers' results
    producer_pids: tuple[int, ...]
    producer_busy: float  # mean over the workers: /proc cores when known, else sample share
    producer_busy_source: str  # "proc" or "samples"
    entry: Site | None  # the user function the worker loop calls (Dataset.__getitem__, the task)
    transform: Site | None  # the hottest user function under it (both shares: of the busy samples)
    consumer_samples: int = 0  # the consumer thread's samples its shares are proportions of
    # the consumer is asyncio request tasks suspended on the pool's futures (its samples: the
    # task reader's reads), not a thread blocked on them
    consumer_tasks: bool = False

    @property
    def workers(self) -> int:
        return len(self.producer_pids)

    @property
    def bottleneck(self) -> str:
        """"producers" when the workers are the busier stage relative to their number."""
        return "producers" if self.producer_busy >= self.consumer_busy else "consumer"

    def knob(self) -> tuple[str, str]:
        return KNOBS[self.framework]


def is_library_frame(frame: Frame) -> bool:
    """Native, or the libraries' own code between a worker loop and its task (or above a
    consumer's wait)."""
    return frame.native or any(part in frame.file for part in _LIBRARY) or frame.file.startswith("<")


def worker_loop(frames: list[Frame]) -> tuple[int, Framework] | None:
    """The innermost worker-loop frame: a forked worker's stack starts with its parent's frames."""
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        for suffix, pattern, framework in WORKER_LOOPS:
            if not f.native and frame_is(f, suffix, pattern):
                return i, framework
    return None


def _result_wait(frames: list[Frame]) -> int | None:
    """Index of the outermost result-wait frame, or None."""
    for i, f in enumerate(frames):
        if not f.native and any(frame_is(f, s, p) for s, p in RESULT_WAITS):
            return i
    return None


def _rows(rows: pd.DataFrame) -> Iterator[tuple[int, str, int]]:
    """(stack id, state, count) of each of `rows`."""
    for sid, state, count in zip(rows["stack"].to_numpy(), rows["state"].astype(str).to_numpy(),
                                 rows["count"].to_numpy()):
        yield int(sid), state, int(count)


def _stacks(analysis: Analysis, rows: pd.DataFrame) -> Iterator[tuple[list[Frame], str, int]]:
    """(frames, state, count) of each of `rows`."""
    profile = analysis.profile
    for sid, state, count in _rows(rows):
        yield [profile.frames[i] for i in profile.stacks[sid]], state, count


@dataclass(frozen=True)
class _LoopStack:
    """A stack inside a worker loop: the loop's framework, the first user frame it calls (its
    (function, file) and line) and the user frames below that one, each (function, file) once
    with its first line."""

    framework: Framework
    called: tuple[tuple[str, str], int] | None
    callees: tuple[tuple[tuple[str, str], int], ...]


def _loop_stack(analysis: Analysis, sid: int) -> _LoopStack | None:
    frames = [analysis.profile.frames[i] for i in analysis.profile.stacks[sid]]
    found = worker_loop(frames)
    if found is None:
        return None
    index, framework = found
    user = [j for j in range(index + 1, len(frames)) if not is_library_frame(frames[j])]
    if not user:
        return _LoopStack(framework, None, ())
    first = frames[user[0]]
    callees: dict[tuple[str, str], int] = {}
    for j in user[1:]:
        callees.setdefault((frames[j].function, frames[j].file), frames[j].line)
    return _LoopStack(framework, ((first.function, first.file), first.line), tuple(callees.items()))


# (framework, busy share of the worker loop's thread, entry, transform) of a producer process
_Produced = tuple[Framework, float, Site | None, Site | None]


def _producer(view: ProcessView) -> tuple[Framework, float, Site | None, Site | None] | None:
    """(framework, busy share of its loop thread, entry, transform) when the process is a worker."""
    samples = view.analysis.samples
    if samples.empty:
        return None
    best = None
    loops: dict[int, _LoopStack | None] = {}  # per stack id: rows share stacks
    for _thread, rows in samples.groupby("thread", sort=False):
        total, looped, busy = 0, 0, 0
        framework = None
        # (function, file) -> (line, samples)
        entries: dict[tuple[str, str], tuple[int, int]] = {}
        callees: dict[tuple[str, str], tuple[int, int]] = {}
        for sid, state, count in _rows(rows):
            total += count
            if sid not in loops:
                loops[sid] = _loop_stack(view.analysis, sid)
            found = loops[sid]
            if found is None:
                continue
            framework = found.framework
            looped += count
            if state not in BUSY:
                continue
            busy += count
            if found.called is None:
                continue
            key, called_line = found.called
            entries[key] = entries.get(key, (called_line, 0))[0], entries.get(key, (0, 0))[1] + count
            for fk, first_line in found.callees:
                line, c = callees.get(fk, (first_line, 0))
                callees[fk] = (line, c + count)
        if framework is None or looped < 0.5 * total:
            continue
        if best is None or looped > best[0]:
            best = (looped, framework, busy / total if total else 0.0, entries, callees, busy)
    if best is None:
        return None
    _, framework, share, entries, callees, busy = best
    entry: Site | None = None
    transform: Site | None = None
    if entries:
        (fn, file), (line, c) = max(entries.items(), key=lambda kv: kv[1][1])
        entry = Site(fn, file, line, round(c / busy, 4) if busy else 0.0)
    if callees:
        (fn, file), (line, c) = max(callees.items(), key=lambda kv: kv[1][1])
        transform = Site(fn, file, line, round(c / busy, 4) if busy else 0.0)
    return framework, share, entry, transform or entry


def _consumer(view: ProcessView) -> tuple[str, float, float, Site | None, int] | None:
    """(thread name, busy share, starved share, site, its samples) of the thread waiting on
    results."""
    analysis = view.analysis
    samples = analysis.samples
    best = None
    for thread, rows in samples.groupby("thread", sort=False):
        if analysis.threads.loc[thread, "role"] == vocab.ThreadRole.LIBRARY:
            continue  # a pool's own handler threads wait on pipes too; they consume nothing
        total, busy, starved, busy_in_wait = 0, 0, 0, 0
        sites: dict[tuple[str, str, int], int] = {}  # (function, file, line) -> samples
        for frames, state, count in _stacks(analysis, rows):
            total += count
            index = _result_wait(frames)
            if state in BUSY:
                busy += count
                if index is not None:
                    busy_in_wait += count
                continue
            if index is None:
                continue
            starved += count
            caller = next((j for j in range(index - 1, -1, -1) if not is_library_frame(frames[j])), None)
            if caller is not None:
                f = frames[caller]
                sites[(f.function, f.file, f.line)] = sites.get((f.function, f.file, f.line), 0) + count
        if not total or not (starved or busy_in_wait):
            continue
        busy_share, starved_share = busy / total, starved / total
        proc = _thread_demand(analysis, thread)
        if proc is not None and proc < busy_share:
            # OS counters outrank the samples: a thread "running" inside its result wait more
            # than /proc's CPU + run-queue time allows was waiting (a non-blocking sampler
            # can catch a poll() as running Python).
            busy_share = proc
            starved_share = min(starved_share + busy_in_wait / total, 1.0 - proc)
        elif proc is not None:
            # ...and the other way: a consumer /proc saw running (its model in native code,
            # unpickling results) more than the samples' states said was busy. At a few samples
            # a second, estimated states can call most of that time a wait.
            busy_share = proc
            starved_share = min(starved_share, 1.0 - proc)
        if not starved_share:
            continue
        if best is None or starved_share + busy_share > best[0]:
            name = str(analysis.threads.loc[thread, "name"]) if "name" in analysis.threads else str(thread)
            site = None
            if sites:
                (fn, file, line), c = max(sites.items(), key=lambda kv: kv[1])
                site = Site(fn, file, line, round(c / sum(sites.values()), 4))
            best = (starved_share + busy_share, name, busy_share, starved_share, site, total)
    return None if best is None else best[1:]


def _task_consumer(view: ProcessView) -> tuple[str, float, float, Site | None, int] | None:
    """The consumer as asyncio request tasks (thread name, busy, starved, site, reads): tasks
    awaiting futures (`loop.run_in_executor(pool, ...)`) that no worker thread of the process
    resolves, in the parent of pool workers: the pool's futures. A suspended task is on no
    thread's stack, so no thread of the consumer waits on the results; the task reader says how
    much of the request tasks' time waited there. Busy: the event loop thread's share running
    (its /proc CPU where read)."""
    analysis = view.analysis
    tasks = analysis.await_sites
    if tasks is None or not tasks.local_sites:
        return None
    site = tasks.local_sites[0]
    workers = analysis.worker_threads
    if site.kind != vocab.AwaitKind.FUTURE or (workers is not None and workers.threads):
        return None  # a thread executor's futures: its threads are the chain (model/task_chains.py)
    loops = analysis.event_loops
    loop = max(loops, key=lambda lp: lp.samples) if loops else None
    if loop is None:
        thread, busy = "event loop", 0.0
    else:
        thread, busy = loop.thread, loop.cpu_share_os if loop.cpu_share_os is not None else loop.busy_share
    return thread, float(busy), float(site.share), Site(site.function, site.file, site.line, 1.0), tasks.snapshots


def _thread_demand(analysis: Analysis, thread: int) -> float | None:
    """Share of the window the thread ran or waited for a core, by /proc; None unknown."""
    os_ = analysis.os
    if os_ is None or not os_.window_s or "tid" not in analysis.threads:
        return None
    counters = os_.threads.get(int(analysis.threads.loc[thread, "tid"]))
    if counters is None:
        return None
    return min(1.0, (counters.cpu_s + (counters.runqueue_wait_s or 0.0)) / os_.window_s)


def _demand(view: ProcessView) -> float | None:
    """Share of the window the process ran or was runnable (CPU + run-queue wait, /proc): on a
    machine whose other load keeps it off the cores, a worker that always wants to run is
    saturated all the same. The window is the one py-spy left it to run in: a DataLoader worker
    stopped 23% of a window by native sampling of its torch stacks read 64% busy, and its stage
    fell under preprocessing (dataloader_job, CPython 3.13). None without OS counters."""
    os_ = view.analysis.os
    if os_ is None or not os_.window_s:
        return None if view.cpu_cores is None else min(1.0, view.cpu_cores)
    wait = os_.runqueue_wait_s or 0.0
    return min(1.0, (os_.cpu_s + wait) / unpaused_window_s(os_))


def find_process_pipeline(service: Service) -> ProcessPipeline | None:
    """The consumer process and its worker processes, when the tree is one."""
    if not service.multi:
        return None
    producers: dict[int, list[tuple[ProcessView, _Produced]]] = {}
    for view in service.processes:
        # (a process of a sampled tree always has its pid: None is the lone offline process's).
        # Whatever its role: a pool's worker that ran little beside its parent reads as a
        # helper (model/service.py), yet the loop it runs says it serves the parent's tasks.
        if view.ppid is None or view.pid is None:
            continue
        found = _producer(view)
        if found is not None:
            producers.setdefault(view.ppid, []).append((view, found))
    by_pid = {v.pid: v for v in service.processes}
    best = None
    for parent_pid, workers in producers.items():
        parent = by_pid.get(parent_pid)
        if parent is None:
            continue
        consumer, tasks = _consumer(parent), False
        if consumer is None:
            consumer, tasks = _task_consumer(parent), True
        if consumer is None:
            continue
        if best is None or len(workers) > len(best[1]):
            best = (parent_pid, workers, consumer, tasks)
    if best is None:
        return None
    parent_pid, workers, (thread, c_busy, c_starved, c_site, c_samples), by_tasks = best
    framework = max((f[0] for _, f in workers), key=lambda fw: sum(1 for _, f in workers if f[0] is fw))
    demand = [_demand(v) for v, _ in workers]
    known = [d for d in demand if d is not None]
    if len(known) == len(demand):
        busy, source = float(np.mean(known)), "proc"
    else:
        busy, source = float(np.mean([f[1] for _, f in workers])), "samples"
    hottest = max(workers, key=lambda w: w[1][1])[1]
    return ProcessPipeline(
        framework=framework, consumer_pid=parent_pid, consumer_thread=thread, consumer_site=c_site,
        consumer_busy=round(c_busy, 4), consumer_starved=round(c_starved, 4),
        producer_pids=tuple(v.pid for v, _ in workers if v.pid is not None), producer_busy=round(busy, 4),
        producer_busy_source=source, entry=hottest[2], transform=hottest[3], consumer_samples=c_samples,
        consumer_tasks=by_tasks)
