"""Everything the checks read: the sample table, per-thread summary and OS numbers."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from diagnose.classify.calibrate import calibration_from
from diagnose.classify.categories import Categorizer
from diagnose.classify.state import gil_waits_leaving_a_wait
from diagnose.model.os_state import lock_taking, settle_with_kernel, settle_with_os_state
from diagnose.collect.procfs import ProcRecord
from diagnose.collect.task_recording import TaskRecording
from diagnose.model.kernel_waits import KernelView, WaitObject
from diagnose.model.library_threads import LIBRARY_THREAD_SHARE, library_stacks
from diagnose.samples.native_libraries import LIBRARIES as POOL_LIBRARIES
from diagnose.model.os_summary import ProcessOS, ProcThread, summarize
from diagnose.samples.profile import Frame, Profile
from diagnose.collect.run_context import RunContext
from diagnose.model.servers import ServerProcess
from diagnose.model.table import StackTable, build_sample_table, classify_stacks
from diagnose.vocab import ACTIVE, PARKING_KINDS, RUNNING, STATES, ProcessRole, ThreadRole, ThreadState, WaitKind

if TYPE_CHECKING:  # imported where used at run time: these modules read the Analysis
    from diagnose.model.chains import Chain, ChainContext
    from diagnose.model.condition_waits import ConditionWaits
    from diagnose.model.children import ChildProcesses
    from diagnose.model.cores_held import CoresHeld
    from diagnose.model.syscall_sites import SyscallSamples
    from diagnose.model.poll_loops import PollLoops
    from diagnose.model.async_polls import AsyncPolls
    from diagnose.report.model import ProcessTasks
    from diagnose.model.collector import CollectorShare
    from diagnose.model.deadlock import Deadlock
    from diagnose.model.gil_holder import GilHolding
    from diagnose.model.knots import Knot
    from diagnose.model.lock_holders import LockHolding
    from diagnose.model.native_pools import PoolSplit
    from diagnose.model.worker_threads import ThreadHolders
    from diagnose.model.structure import StageThreads
    from diagnose.report.model.sections import EventLoop, Stage, Structure, WaitSite

REQUEST_ACTIVE_SHARE = 0.2  # a thread busy or blocked this often is handling requests...
# ...unless it is parked (waits of vocab.PARKING_KINDS): a thread (typically the main
PARKED_SHARE = 0.9                  # thread) blocked in Event.wait()/join() nearly all window
PARKED_MAX_BUSY = 0.02              # and almost never running is not serving requests. A lock
# convoy is never "parked", however long its threads wait.
IDLE_SHARE = 0.5
# A native thread on a core, or runnable waiting for one, at least this share of the window works
# (Analysis.working_native_threads).
WORKING_CPU_SHARE = 0.02

# The GIL wait site's top holder is named on the chain (its hop's `held_by`) where it ran this
# share of the time threads waited there, at least: the recordings' real holders ran 35-88% of
# it, the incidental ones (a GIL held asleep, a poll loop's wake) 2-23%.
HELD_BY_SHARE = 0.3


@dataclass
class Analysis:
    profile: Profile
    stacks: StackTable
    samples: pd.DataFrame
    threads: pd.DataFrame  # index: thread index; tid, name, role, samples, one column per state
    os: ProcessOS | None
    run: RunContext = field(default_factory=RunContext)  # the target and how it was sampled
    process_role: ProcessRole = ProcessRole.SINGLE  # set by the service model
    native: Profile | None = None  # native-frame samples of the same window (the profile itself
    # at full fidelity, else the sparse calibration samples), for what runs inside C libraries
    # The process's asyncio tasks read from its memory over the window (`attach`); None offline
    # or where no reader ran.
    tasks: TaskRecording | None = None
    # What the kernel saw each blocked thread wait on (model/kernel_waits.py); None offline or
    # where the reader did not run.
    kernel: KernelView | None = None
    # The local processes serving its sockets, read beside it (model/servers.py), by pid; empty
    # offline or where its threads waited on no socket a local process serves.
    servers: Mapping[int, ServerProcess] = field(default_factory=dict)
    # Its children's CPU over the window and what was seen of them (model/children.py); None
    # offline or in recordings without the process-level counters.
    children: ChildProcesses | None = None
    # Who held the machine's cores over the window: the service, diagnose, the other processes
    # (model/cores_held.py); None without the machine's idle time.
    cores_held: CoresHeld | None = None

    @functools.cached_property
    def gil_holding(self) -> GilHolding | None:
        """What the GIL's holder did while request threads waited for it (model/gil_holder.py),
        read once: gil_contention and cpu_bound both ask."""
        from diagnose.model.gil_holder import gil_holding
        return gil_holding(self.kernel, [int(t) for t in self.request_threads["tid"]])

    @functools.cached_property
    def collector(self) -> CollectorShare | None:
        """The cyclic garbage collector's share of the process's running native samples
        (model/collector.py); None without native samples of its Python threads."""
        from diagnose.model.collector import collector_share
        pids = {int(p) for p in self.threads["pid"].dropna()}
        return collector_share(self.native, {int(t) for t in self.threads["tid"]},
                               next(iter(pids)) if len(pids) == 1 else None, self.os)

    @functools.cached_property
    def handler_threads(self) -> set[int]:
        """Threads (summary index) that ran inside a server's request-handling frames, whatever
        role their samples gave them (model/handlers.py)."""
        from diagnose.model.handlers import handler_threads
        return handler_threads(self.profile, self.samples)

    @functools.cached_property
    def poll_loops(self) -> PollLoops:
        """The request threads' sleeps inside `while` loops of their own code: polling for a
        result another thread produces (model/poll_loops.py)."""
        from diagnose.model.poll_loops import poll_loops
        mains = self.threads.index[(self.threads["tid"] == self.threads["pid"]).fillna(False).to_numpy(dtype=bool)]
        return poll_loops(self.profile, self.samples, set(self.request_threads.index) | self.handler_threads,
                          {int(t) for t in mains}, self.frame)

    @functools.cached_property
    def async_polls(self) -> AsyncPolls:
        """The request tasks' awaited sleeps inside `while` loops (model/async_polls.py)."""
        from diagnose.model.async_polls import async_polls
        return async_polls(self.tasks)

    @functools.cached_property
    def chains(self) -> tuple[Chain, ...]:
        """Every chain of waits of the process's threads, from what they wait on to where the
        wait ends, most thread-time first (model/chains.py); none without the kernel's record.
        backend_saturated and underloaded ask it which of their threads' waits a local server
        ends."""
        from diagnose.model.chains import follow_chains
        if self.kernel is None:
            return ()
        # a library's transport threads serve the process's own machinery, never a request
        tids = [int(r.tid) for r in self.threads.itertuples() if r.role != ThreadRole.LIBRARY]
        window = self.os.window_s if self.os is not None else 0.0
        knotted = {h.wait.thread.tid for k in self.knots for h in (*k.members, *k.victims)}
        return follow_chains(self.kernel, tids, window, self.chain_context, knotted, self.condition_waits)

    @functools.cached_property
    def condition_waits(self) -> ConditionWaits:
        """Its threads' waits on one Condition (a pool's queue), each on a futex of its own to
        the kernel, as one wait, and its pools' holders (model/condition_waits.py); none without
        the kernel's record or on a recording whose samples carry no instants of their own."""
        from diagnose.model.condition_waits import NO_CONDITION_WAITS, condition_waits
        if self.kernel is None or not self.tick_stacks:
            return NO_CONDITION_WAITS
        stacks = self.stacks
        return condition_waits(self.kernel, self.tick_stacks, self.stack_frames,
                               lambda stack: int(stacks.site[stack]), lambda stack: str(stacks.wait_kind[stack]),
                               self.frame)

    @functools.cached_property
    def tick_stacks(self) -> Mapping[int, np.ndarray]:
        """Per thread the kernel saw, the stack py-spy saw it keep at each of its /proc ticks (in
        the order of kernel.times; -1: none kept), matched once for the readers that ask what a
        thread's code did at a tick (lock_holdings, condition_waits); empty without the kernel's
        record or on a recording whose samples carry no instants of their own."""
        from diagnose.model.os_state import stacks_at_ticks
        profile = self.profile
        if self.kernel is None or profile.instants != "measured":
            return {}
        changes = _stack_changes(profile)
        interval = profile.interval_s or 0.01
        return {tid: stacks_at_ticks(changes[tid], np.asarray(times, dtype=np.float64), interval)
                for tid, times in self.kernel.times.items() if tid in changes and len(times)}

    @functools.cached_property
    def gil_holding_stacks(self) -> frozenset[int]:
        """Stacks read as running C code that the interpreter named the GIL's holder at the
        instants threads waited for it (model/gil_holder.py): the holders of a GIL no Python
        frame runs. Empty without the kernel's record or the interpreter's state."""
        from diagnose.model.gil_holder import gil_holding_stacks
        return gil_holding_stacks(self.kernel, self.tick_stacks)

    def stack_frames(self, stack: int) -> list[Frame]:
        """A stack's frames, outermost first."""
        return [self.frame(f) for f in self.profile.stacks[stack]]

    @functools.cached_property
    def task_chains(self) -> tuple[Chain, ...]:
        """The asyncio request tasks' chain of waits through the worker threads their futures or
        capacity hand work to (model/task_chains.py); none without the tasks read or workers."""
        from diagnose.model.task_chains import task_chains
        window = self.os.window_s if self.os is not None else 0.0
        return task_chains(self.await_sites, self.worker_threads, self.chains, window)

    @functools.cached_property
    def worker_threads(self) -> ThreadHolders | None:
        """The threads serving work handed to threads (an executor's, AnyIO's) and where, busy,
        they were; None where none was seen (model/worker_threads.py)."""
        from diagnose.model.worker_threads import thread_holders
        return thread_holders(self)

    @functools.cached_property
    def chain_context(self) -> ChainContext:
        """What the chains' server rules read of this process besides its waits: the servers
        read beside it, its GIL's holding, its locks' holders (model/chains.py)."""
        from diagnose.model.chains import ChainContext
        from diagnose.model.counters import wanted_cores
        from diagnose.model.gil_holder import blocked_share
        names = {int(t): str(n) for t, n in zip(self.threads["tid"], self.threads["name"]) if n}
        gil = next((w for w in self.waits if w.kind == WaitKind.GIL and w.holders), None)
        top = gil.holders[0] if gil is not None else None
        held_by = (f"{top.function} ({top.file.rsplit('/', 1)[-1]}:{top.line})"
                   if top is not None and top.share >= HELD_BY_SHARE else "")
        return ChainContext(self.kernel.pid if self.kernel is not None else None, self.servers, self.gil_holding,
                            blocked_share(self.gil_holding, wanted_cores(self.os)), self.lock_holdings, names,
                            self.condition_waits.pools, held_by)

    @functools.cached_property
    def lock_holdings(self) -> Mapping[str, LockHolding]:
        """Per lock the kernel saw its threads wait on (its key), the threads the frames saw
        holding it and what they waited on meanwhile (model/lock_holders.py); none without the
        kernel's record or on a recording whose samples carry no instants of their own."""
        from diagnose.model.lock_holders import lock_holdings
        profile = self.profile
        if self.kernel is None or not self.tick_stacks:
            return {}

        def site(stack: int) -> int:
            at = int(self.stacks.site[stack])
            return profile.innermost_index(stack, at) if at >= 0 else -1

        return lock_holdings(self.kernel, self.tick_stacks, self.stack_frames, site)

    @functools.cached_property
    def syscalls(self) -> SyscallSamples | None:
        """The native samples of the process's Python threads caught inside a work system call
        and the lines that made it (model/syscall_sites.py); None without native samples."""
        from diagnose.model.syscall_sites import syscall_samples
        pids = {int(p) for p in self.threads["pid"].dropna()}
        return syscall_samples(self.native, {int(t) for t in self.threads["tid"]},
                               next(iter(pids)) if len(pids) == 1 else None)

    @functools.cached_property
    def native_threads(self) -> int:
        """Threads of the process with no Python frames (intra-op pools: OpenMP, BLAS, libuv),
        seen only by /proc; 0 without OS counters."""
        return len(self._native_os_threads)

    @functools.cached_property
    def working_native_threads(self) -> int:
        """Native threads that ran over the window, or sat runnable waiting for a core (at least
        WORKING_CPU_SHARE of it, run-queue wait included): an intra-op pool that computes beside
        the request threads. A pool created at import and never handed work (OpenBLAS's threads
        under a model too small to split) sleeps: it competes for no core. One that other
        processes kept off the cores still competes for them: a CI attach on a machine whose
        cores others held saw OpenBLAS's pool thread runnable all window, 0.08 s on a core."""
        return len(self._working_native_os_threads)

    @functools.cached_property
    def working_native_cpu_s(self) -> float:
        """CPU seconds the working native threads (working_native_threads) ran over the window,
        by the kernel's counters; 0 without them."""
        return float(sum(t.cpu_s for t in self._working_native_os_threads))

    @functools.cached_property
    def working_native_system_s(self) -> float:
        """System time the working native threads (working_native_threads) ran over the window,
        by the kernel's counters; 0 without them."""
        return float(sum(t.system_s or 0.0 for t in self._working_native_os_threads))

    @functools.cached_property
    def _working_native_os_threads(self) -> list[ProcThread]:
        if self.os is None:
            return []
        least = WORKING_CPU_SHARE * self.os.window_s
        if not self._threads_joined:
            # Python's threads are among them, and starved ones sit runnable too: only a thread's
            # own CPU speaks for it (CI's starved recording read "a pool of 9" by run-queue wait).
            return [thread for thread in self._native_os_threads if thread.cpu_s >= least]
        return [thread for thread in self._native_os_threads
                if thread.cpu_s + (thread.runqueue_wait_s or 0.0) >= least]

    @functools.cached_property
    def _native_os_threads(self) -> list[ProcThread]:
        """The OS counters of the threads with no Python frames; none without OS counters."""
        if self.os is None:
            return []
        return [thread for tid, thread in self.os.threads.items() if tid not in self._python_tids]

    @functools.cached_property
    def _threads_joined(self) -> bool:
        """The samples' thread ids are the kernel's: false for a recording that names threads by
        pthread id with no map to the kernel's ids (made before the attach read one:
        collect/pthread_ids.py), where every /proc thread looks native."""
        python_tids = self._python_tids
        return self.os is not None and not (python_tids and python_tids.isdisjoint(self.os.threads))

    @functools.cached_property
    def _python_tids(self) -> frozenset[int]:
        """The ids of the threads the samples saw run Python."""
        return frozenset(int(t) for t in self.threads["tid"])

    @functools.cached_property
    def pool_splits(self) -> list[PoolSplit]:
        """Per native library: kernel vs pool-synchronisation samples of this process's threads."""
        from diagnose.model.native_pools import pool_split
        return pool_split(self.native, {int(t) for t in self.threads["tid"]})

    @property
    def request_threads(self) -> pd.DataFrame:
        """The request threads' rows of the thread summary, selected once (read by most checks;
        callers only read them); selected again if the summary is replaced."""
        cached = self.__dict__.get("_request_threads")
        if cached is None or cached[0] != id(self.threads):
            selected = self.threads[self.threads["role"] == ThreadRole.REQUEST]
            cached = self.__dict__["_request_threads"] = (id(self.threads), selected)
        return cached[1]

    def request_samples(self) -> pd.DataFrame:
        """The request threads' rows, selected once (the checks read them many times); selected
        again if the sample table or the thread summary is replaced."""
        key = (id(self.samples), id(self.threads))
        cached = self.__dict__.get("_request_samples")
        if cached is None or cached[0] != key:
            mask = self.samples["thread"].isin(self.request_threads.index).to_numpy()
            rows = np.flatnonzero(mask)
            if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
                # one block of rows (a thread's samples are consecutive): a slice, not a copy
                selected = self.samples.iloc[int(rows[0]):int(rows[-1]) + 1]
            else:
                selected = self.samples[mask]
            cached = self.__dict__["_request_samples"] = (key, selected)
        return cached[1]

    def frame(self, frame_id: int) -> Frame:
        return self.profile.frames[frame_id]

    @functools.cached_property
    def _structure(self) -> tuple[Structure, StageThreads]:
        from diagnose.model.structure import build_structure
        return build_structure(self)

    @property
    def structure(self) -> Structure:
        """Stages, their queues and who waits for whom (model/structure.py)."""
        return self._structure[0]

    def stage_threads(self, stage: Stage) -> tuple[int, ...]:
        """The thread indices (the sample table's `thread`) of a stage of `structure`."""
        return self._structure[1].get((stage.function, stage.file), ())

    @functools.cached_property
    def event_loops(self) -> list[EventLoop]:
        """Event-loop threads with their idle / busy split and what ran on them."""
        from diagnose.model.event_loops import event_loops
        return event_loops(self)

    @functools.cached_property
    def await_sites(self) -> ProcessTasks | None:
        """The asyncio request tasks' waits by await site (model/await_sites.py); None without
        a recording of the tasks, or when none could be read."""
        if self.tasks is None or not self.tasks.snapshots:
            return None
        from diagnose.model.await_sites import summarize_tasks
        return summarize_tasks(self.tasks)

    @functools.cached_property
    def deadlocks(self) -> tuple[Deadlock, ...]:
        """Cycles of threads blocked all window on each other's locks (model/deadlock.py)."""
        from diagnose.model.deadlock import find_deadlocks
        return find_deadlocks(self)

    @functools.cached_property
    def knots(self) -> tuple[Knot, ...]:
        """Threads waiting on one another through any resource (locks, futures, queues, pipes,
        children), none of them running all window (model/knots.py)."""
        from diagnose.model.knots import process_knots
        return process_knots(self)

    @functools.cached_property
    def waits(self) -> list[WaitSite]:
        """The ranked wait-site table with holders (computed once, read by several checks)."""
        from diagnose.model.waits import wait_sites
        return wait_sites(self)

    @functools.cached_property
    def native_mutex_share(self) -> float:
        """The request threads' share of time queued on a native library's internal mutex
        (OpenBLAS lets one caller at a time into its pool): scheduler_overhead scores the fan-out
        by it, compute_bound leaves it out of the model's compute."""
        return sum(w.share for w in self.waits if w.kind == WaitKind.NATIVE_MUTEX)


def summarize_threads(profile: Profile, samples: pd.DataFrame) -> pd.DataFrame:
    """Per thread (index: its place in profile.threads): tid, pid, name, role, samples, and its
    samples in each state. Summed with numpy by thread index: pandas' grouping cost more than
    the rest of the summary."""
    n = len(profile.threads)
    thread = samples["thread"].to_numpy(dtype=np.int64)
    count = samples["count"].to_numpy(dtype=np.int64)
    state = samples["state"].cat.codes.to_numpy(dtype=np.int64)  # the codes are STATES' places

    def per_thread(rows: np.ndarray | None = None) -> np.ndarray:
        """The samples of each thread (of the rows selected)."""
        at, weights = (thread, count) if rows is None else (thread[rows], count[rows])
        return np.bincount(at, weights=weights, minlength=n)[:n].round().astype(np.int64)

    by_state = np.bincount(thread * len(STATES) + state, weights=count, minlength=n * len(STATES))
    counts = pd.DataFrame(by_state[:n * len(STATES)].round().astype(np.int64).reshape(n, len(STATES)),
                          index=pd.RangeIndex(n, name="thread"),
                          columns=pd.Index(list(STATES), dtype="str", name="state"))
    total = counts.to_numpy().sum(axis=1)
    safe_total = np.where(total > 0, total, 1)

    def share(column_sum: np.ndarray) -> np.ndarray:
        return column_sum / safe_total

    active = counts[list(ACTIVE)].to_numpy().sum(axis=1)
    busy = counts[list(RUNNING)].to_numpy().sum(axis=1)
    site_max = np.full(n, -1, dtype=np.int64)
    np.maximum.at(site_max, thread, samples["site"].to_numpy(dtype=np.int64))
    has_python = (site_max >= 0) | (per_thread(state == STATES.index(ThreadState.PYTHON)) > 0)
    role = np.full(n, ThreadRole.OTHER, dtype=object)
    role[share(counts[ThreadState.IDLE].to_numpy()) >= IDLE_SHARE] = ThreadRole.IDLE
    parked = ((share(per_thread(_parking_rows(profile, samples, state))) >= PARKED_SHARE)
              & (share(busy) < PARKED_MAX_BUSY))
    role[(share(active) >= REQUEST_ACTIVE_SHARE) & ~parked & has_python] = ThreadRole.REQUEST
    # A library's transport thread (a queue feeder, a pool's result handler) is never a
    # request handler nor an idle worker, however it spends its time (model/library_threads.py).
    in_library = library_stacks(profile)[samples["stack"].to_numpy(dtype="int64")]
    role[share(per_thread(in_library)) >= LIBRARY_THREAD_SHARE] = ThreadRole.LIBRARY
    out = pd.DataFrame({
        "tid": [t.tid for t in profile.threads],
        "pid": pd.array([t.pid for t in profile.threads], dtype="Int64"),
        "name": [t.name for t in profile.threads],
        "role": role,
        "samples": total,
    }, index=counts.index)
    return pd.concat([out, counts], axis=1)


def _parking_rows(profile: Profile, samples: pd.DataFrame, state: np.ndarray) -> np.ndarray:
    """The rows where the thread is parked: a parking wait, or the GIL re-taken inside the
    parking call as a timed wait returns (a main thread's `Event.wait(0.5)` loop beside busy
    threads queues for the GIL at each wake-up, 12% of its time in one recording)."""
    parking: np.ndarray = samples["wait_kind"].isin(PARKING_KINDS).to_numpy(dtype=bool, copy=True)
    leaving = gil_waits_leaving_a_wait(profile, samples["stack"].to_numpy(dtype=np.int64),
                                       state == STATES.index(ThreadState.GIL), PARKING_KINDS)
    parking |= leaving
    return parking


def classify_profile(profile: Profile, categorizer: Categorizer,
                     native_profile: Profile | None = None) -> StackTable:
    """Classifies every distinct stack once. `native_profile`: sparse native samples of the same
    window that calibrate the states of a Python-only profile (the gentle sampling plan)."""
    calibration = None
    if native_profile is not None and not profile.native:
        calibration = calibration_from(native_profile)
        profile.calibrated = bool(calibration)
        profile.calibration_files = frozenset(f.file for f in native_profile.frames if f.native)
    return classify_stacks(profile, categorizer, calibration)


def pool_library_stacks(profile: Profile) -> np.ndarray:
    """Per stack of the profile: it runs in an intra-op pool's library (OpenBLAS, OpenMP, MKL,
    torch, ONNX Runtime), whose native waits are the pool's own synchronisation."""
    def in_pool(frame: Frame) -> bool:
        return bool(frame.native and frame.file
                    and any(pattern.search(frame.file) for _, pattern, _ in POOL_LIBRARIES))
    flags = np.array([in_pool(f) for f in profile.frames], dtype=bool)
    return profile.stacks_with_any(flags) if flags.any() else np.zeros(len(profile.stacks), dtype=bool)


def lock_taking_stacks(profile: Profile, stacks: StackTable) -> np.ndarray:
    """Per stack: Python code takes a lock there, by any reading of it (each part of a calibrated
    stack's mix) or by its line's source (model/os_state.lock_taking)."""
    ids, kinds, sites = [np.arange(len(stacks.state))], [stacks.wait_kind], [stacks.site]
    for sid, (components, _) in stacks.mixtures.items():
        ids.append(np.full(len(components), sid))
        kinds.append(np.array([kind for _, kind, _ in components], dtype=object))
        sites.append(np.array([site for _, _, site in components], dtype=np.int64))
    return lock_taking(np.concatenate(ids), np.concatenate(kinds), np.concatenate(sites), profile.frames,
                       len(stacks.state))


def calls_into_pool(native: Profile) -> bool:
    """Some Python code of these native samples called into an intra-op pool's library (its
    own worker threads, which have no Python frames, do not count: an idle pool is no sign)."""
    pools = pool_library_stacks(native)
    python = np.array([not f.native for f in native.frames], dtype=bool)
    with_python = native.stacks_with_any(python) if python.any() else np.zeros(len(native.stacks), dtype=bool)
    return bool((pools & with_python).any())


def _stack_changes(profile: Profile) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per OS thread, the instants its stack changed and the stack from then (a timestamped
    recording): when py-spy really sampled it."""
    return {tid: v for (_pid, tid), v in stack_changes_by_process(profile).items()}


def stack_changes_by_process(profile: Profile) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """`_stack_changes` keyed by (pid, tid), for votes pooled across processes."""
    out: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if profile.instants != "measured":
        return out
    for track in profile.threads:
        if track.changes is not None and len(track.changes[0]):
            times, stacks = track.changes
            order = np.argsort(times, kind="stable")
            out[(int(track.pid or 0), int(track.tid))] = (np.asarray(times, dtype=np.float64)[order],
                                                          np.asarray(stacks)[order])
    return out


def analysis_of(profile: Profile, stacks: StackTable, proc: ProcRecord | None = None,
                run: RunContext | None = None, os_summary: ProcessOS | None = None,
                native: Profile | None = None, kernel: KernelView | None = None,
                decided: Mapping[int, WaitObject] | None = None) -> Analysis:
    """The analysis of a profile whose stacks are classified (`stacks` may cover a larger
    profile sharing the same stack list, e.g. the whole process tree)."""
    samples = build_sample_table(profile, stacks)
    if os_summary is None and proc is not None:
        os_summary = summarize(proc)
    # The OS has the last word where the frames could not tell a wait from work: first what
    # the kernel saw each thread wait on, then, for the rest, whether it slept all window.
    measured = profile.instants == "measured"
    samples = settle_with_kernel(samples, kernel, profile.interval_s or 0.01,
                                 profile.origin_s if measured else 0.0,
                                 _stack_changes(profile) if measured and kernel is not None else None,
                                 decided, profile.frames, pool_library_stacks(profile),
                                 native is not None and calls_into_pool(native))
    samples = settle_with_os_state(samples, os_summary)
    threads = summarize_threads(profile, samples)
    return Analysis(profile, stacks, samples, threads, os_summary, run if run is not None else RunContext(),
                    native=native if native is not None else (profile if profile.native else None),
                    kernel=kernel)


def analyze_profile(profile: Profile, categorizer: Categorizer, proc: ProcRecord | None = None,
                    run: RunContext | None = None, native_profile: Profile | None = None) -> Analysis:
    """One process (or a profile with no process tags): classify, then analyse."""
    return analysis_of(profile, classify_profile(profile, categorizer, native_profile), proc, run,
                       native=native_profile)
