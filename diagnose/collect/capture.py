"""Attaches to a live pid: probes it, then runs py-spy and the /proc sampler over one window."""

from __future__ import annotations

import ctypes
import os
import re
import resource
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import psutil

from diagnose.collect import activity, observer_cpu, priority, pthread_ids, pyspy, target_state, tree
from diagnose.collect.asyncio_tasks import AsyncioTaskSampler
from diagnose.collect.plan import TreePlan, plan_tree, stop_lead_s, without_native
from diagnose.collect.procfs import ProcRecord, TreeRecord, TreeSampler, cores_available, kept_argv
from diagnose.errors import (Interrupted, NoSamples, NoSuchProcess, NotPython, ProfilerFailed,
                             SignalAbort)
from diagnose.collect.task_recording import TaskRecording
from diagnose.collect.run_context import CaptureSampling
from diagnose.report.model.run import Target
from diagnose.report.redact import redact_cmdline

ATTACH_RETRY_S = 3.0  # a launcher or a just-started interpreter gets this long to become readable
RECORD_GRACE_S = 20.0  # py-spy's time to finish writing after the window
# The window's clock starts when every recorder launched with it says it samples (py-spy prints
# "Sampling process ..." once it has attached), so its start-up is not taken out of the window;
# a recorder that has not said so by then (starved, or failing) does not hold the window back.
START_WAIT_S = 5.0
# The window is closed by time, not by py-spy's count: py-spy stops after duration x rate samples
# drawn at exponential gaps, so its count ends a 6 s window anywhere from 6 to 7 s (and at 16 s
# for an 8 s window starved of CPU beside a saturated service). Each recorder is sent SIGINT (it
# writes what it has) a lead before the window's end that lets it exit about then
# (plan.stop_lead_s; the plan raises a rate so that the window still gets its samples).
# py-spy's own --duration: a backstop past the window, never what ends it.
PYSPY_BACKSTOP_S = 10.0
# What the window's close may take past its end, for callers that size something around it
# (the load generator of a sweep): py-spy's start-up before the clock starts, and its exit.
WINDOW_ALLOWANCE_S = 1.0
WINDOW_ALLOWANCE_SHARE = 0.25
# py-spy says it fell behind only when a sample is over 1 s late; a recorder that did is named.
_BEHIND = re.compile(r"([\d.]+)(ms|s|µs|us) behind in sampling")


def window_close_s(duration: float) -> float:
    """Seconds after the capture starts by which its window has closed: the asked duration, plus
    py-spy's start-up (the clock starts after it) and its exit after the stop."""
    return duration + max(WINDOW_ALLOWANCE_S, WINDOW_ALLOWANCE_SHARE * duration)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class AttachOptions:
    duration: float = 10.0
    rate: int | None = None  # None: chosen by the sampling plan from the thread count
    native: str = "auto"  # "auto", "on", "off"
    retry_s: float = ATTACH_RETRY_S
    children: bool = True  # sample the pid's descendant processes too (--no-children: off)
    async_tasks: bool = True  # read each process's asyncio tasks (--no-async-tasks: off)
    kernel_waits: bool = True  # read sleeping threads' syscalls (--no-kernel-waits: off)
    followed: tuple[int, ...] = ()  # of the pids, the peers --follow-peers added to the service


@dataclass
class Capture:
    profile_path: Path
    proc: ProcRecord
    target: Target  # as the report states it: its command line redacted
    sampling: CaptureSampling
    started_at: float
    partial: bool = False
    notes: list[str] = field(default_factory=list)
    native_profile_path: Path | None = None  # sparse native samples that calibrate the states
    tree: TreeRecord | None = None  # /proc records of every process sampled
    extra_profile_paths: list[Path] = field(default_factory=list)  # further named pids' recordings
    extra_native_paths: list[Path] = field(default_factory=list)
    interrupted_by: int | None = None  # the signal that cut the window short
    recorder_failure: str | None = None  # a recorder killed mid-window (the others' samples kept)
    temp_dir: Path | None = None  # py-spy's outputs until the report is written; see cleanup()
    # asyncio tasks read from each sampled process's memory (collect/task_recording.py), by pid
    task_recordings: dict[int, TaskRecording] = field(default_factory=dict)
    argv: tuple[str, ...] = ()  # the target's command line as read, its secrets masked

    def cleanup(self) -> None:
        """Removes the temporary directory and whatever the report did not take from it."""
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP over one `attach`. Once the recorders run (`graceful`), the
    first one ends the window early: each recorder gets SIGINT, on which py-spy writes what it
    has, and the partial report is written. Before that (nothing collected yet), or a second
    time, it aborts: the recorders are killed and SignalAbort is raised. A signal ignored when we
    started (`nohup` ignores SIGHUP) stays ignored. Handlers exist in the main thread only;
    elsewhere `install` does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at: float | None = None  # time.monotonic() of the first signal
        self.graceful = False
        self.recorders: list[_Recorder] = []
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._installed = False

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()

    def install(self) -> bool:
        """True when this call installed the handlers (so the caller uninstalls them)."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return False
        for signum in STOP_SIGNALS:
            previous = signal.getsignal(signum)
            if previous == signal.SIG_IGN:
                continue
            self._previous[signum] = previous
            signal.signal(signum, self._handle)
        self._installed = True
        return True

    def uninstall(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)
        self._previous.clear()
        self._installed = False

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def error(self, message: str) -> Interrupted:
        """`message` as the Interrupted error of the first signal (exit 128 + its number)."""
        assert self.signum is not None, "error() is for after a signal"
        return Interrupted(message, 128 + self.signum)

    def _handle(self, signum: int, _frame) -> None:
        if self.signum is None and self.graceful:
            self.signum, self.at = signum, time.monotonic()
            _interrupt(self.recorders)
            return
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            message = (f"interrupted by {name} before sampling started: nothing was collected, "
                       f"no report written")
        else:
            message = f"aborted by a second {name}: py-spy stopped, no report written"
        _signal_all(self.recorders, signal.SIGKILL)  # reaped by capture's `finally`
        raise SignalAbort(Interrupted(message, 128 + signum))


def describe_target(pid: int) -> psutil.Process:
    if pid == os.getpid():
        raise NotPython(f"process {pid} is diagnose itself: attach to the service's pid")
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            _refuse_zombie(pid)
        return proc
    except psutil.NoSuchProcess:
        raise NoSuchProcess(f"no process with pid {pid}")
    except psutil.AccessDenied:
        return psutil.Process(pid)


def wait_until_readable(pid: int, retry_s: float) -> pyspy.ProbeResult:
    """Bounded retry while the interpreter starts (or a launcher execs into it)."""
    deadline = time.monotonic() + retry_s
    attempts = 0
    while True:
        attempts += 1
        result = pyspy.probe(pid)
        if result.ok:
            return result
        error = pyspy.classify_probe_failure(result.message, pid)
        if error is not None:
            raise error
        if not psutil.pid_exists(pid):
            raise NoSuchProcess(f"process {pid} exited before it could be sampled")
        if time.monotonic() >= deadline:
            break
        time.sleep(0.4)
    if tree.maps_python(pid):
        raise ProfilerFailed(f"py-spy could not read the Python interpreter of process {pid} "
                             f"after {attempts} tries over {retry_s:.0f} s: {result.message}")
    name = _safe_name(pid)
    raise NotPython(f"process {pid} ({name}) is not a Python process "
                    f"(no Python interpreter found after {attempts} tries): {result.message}")


def _refuse_zombie(pid: int) -> None:
    """A zombie has exited: only its exit status waits for its parent. (A live process whose
    main thread alone has exited also shows `Z` on its pid: its other threads tell it apart.)"""
    state = target_state.process_state(pid)
    if state is not None and any(s not in ("Z", "X") for s in state.threads.values()):
        return
    try:
        ppid = psutil.Process(pid).ppid()
        parent = f"its parent {ppid} ({_safe_name(ppid)})"
    except psutil.Error:
        parent = "its parent"
    raise NoSuchProcess(f"process {pid} is a zombie: it has exited and {parent} has not reaped "
                        f"it yet; there is nothing to sample")


def _refuse_stopped(state: target_state.ProcessState | None) -> None:
    """A process stopped before the attach is left stopped and not sampled: nothing runs, and
    py-spy cannot suspend a stopped process to read it."""
    if state is None or not state.stopped:
        return
    pid = state.pid
    how = target_state.describe_stop(state)
    remedy = ("detach that tracer" if target_state.tracer_pid(pid)
              else f"resume it (kill -CONT {pid})")
    raise NoSamples(f"process {pid} ({_safe_name(pid)}) is {how}: nothing runs to be sampled. "
                    f"It was left as it was; {remedy} and attach again")


def _safe_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def probe_target(pid: int, wanted: str, retry_s: float, notes: list[str],
                 deferred: bool = False) -> tuple[pyspy.ProbeResult, bool]:
    """One successful `py-spy dump` proves the target readable; a native one also proves that
    native unwinding works (a native dump pauses the target, so we take as few as we can; a plain
    one reads it without pausing it).
    `deferred`: the default plan's native calibration answers the native question itself (its
    recorders start with the window and write nothing where py-spy cannot unwind the target:
    _native_profiles), so only a plain dump is taken: on a saturated 3-worker tree the native
    dump held the window back 0.4-0.6 s."""
    if deferred:
        return wait_until_readable(pid, retry_s), True
    if wanted == "off":
        notes.append("native frames off by request: thread state inferred from Python frames only")
        return wait_until_readable(pid, retry_s), False
    first = pyspy.probe(pid, native=True)
    if first.ok:
        return first, True
    probe = wait_until_readable(pid, retry_s)
    return probe, decide_native(pid, wanted, notes)


def decide_native(pid: int, wanted: str, notes: list[str]) -> bool:
    result = pyspy.probe(pid, native=True)
    if result.ok:
        return True
    if wanted == "on":
        raise ProfilerFailed(f"--native was requested but py-spy cannot unwind native frames "
                             f"of process {pid}: {result.message}")
    notes.append(f"native frames unavailable ({result.message}): thread state inferred from "
                 f"Python frames only, and marked estimated")
    return False


def resolve_probe_pid(pid: int, children: bool, retry_s: float) -> int:
    """The Python process to probe for `pid`: itself, or, for a launcher (a shell, a wrapper that
    is not Python), its outermost Python descendant. With --no-children a launcher is an error
    that names the Python pids to attach instead."""
    if pid == os.getpid():
        raise NotPython(f"process {pid} is diagnose itself: attach to the service's pid")
    if tree.maps_python(pid):
        return pid
    if tree.own_processes(tree.descendants(pid)) and not tree.python_descendants(pid):
        raise NotPython(f"no Python process under {pid} ({_safe_name(pid)}) other than diagnose "
                        f"itself: attach to the service's pid")
    deadline = time.monotonic() + retry_s
    while True:
        pythons = tree.outermost_python(pid)
        if pythons:
            if children:
                return pythons[0].pid
            listed = ", ".join(f"{n.pid} ({n.name})" for n in pythons[:8])
            raise NotPython(f"process {pid} ({_safe_name(pid)}) is not a Python process; its Python "
                            f"child processes are {listed}: attach those, or drop --no-children")
        if time.monotonic() >= deadline or not psutil.pid_exists(pid):
            return pid  # wait_until_readable then tells "not Python" or "exec'd into Python"
        time.sleep(0.3)


def _python_members(pids: list[int], children: bool) -> list[int]:
    """The Python processes that will be sampled: each named pid that runs Python (a launcher
    does not: its Python descendants do) and, with children, every Python descendant."""
    members = []
    for pid in pids:
        if tree.maps_python(pid):
            members.append(pid)
        if children:
            members.extend(n.pid for n in tree.python_descendants(pid))
    return list(dict.fromkeys(members))


@dataclass(frozen=True)
class _Recording:
    """What one py-spy recorder writes: the samples of one process."""

    pid: int
    path: Path
    native: bool  # the sparse native calibration recorder (speedscope), else the main one
    rate_hz: int


def _start_recordings(pid: int, plan: TreePlan, native: bool, duration: float, temp_dir: Path,
                      recorders: list[_Recorder], recordings: list[_Recording],
                      opening: bool = False) -> None:
    """One process's recorders, by its plan: the main one and, where the plan calibrates it,
    the native one. One recorder per process, not py-spy --subprocesses: each process gets its
    own rate, and py-spy's scan of every /proc/<pid> for children (10 times a second, per
    recorder) is left to the /proc sampler, which finds them anyway. `opening`: launched with
    the window, whose clock waits for its main recorder (_start_recorder's opener)."""
    mine = plan.of(pid)
    stem = temp_dir / str(pid)
    duration += START_WAIT_S + PYSPY_BACKSTOP_S  # the window's close stops it (_close_window)
    main = _Recording(pid, Path(f"{stem}.chrometrace.json"), False, mine.rate_hz)  # timestamped
    specs = [(main, pyspy.record_command(
        pid, str(main.path), duration, mine.rate_hz, native=native and not plan.sampling.nonblocking,
        nonblocking=plan.sampling.nonblocking))]
    if mine.native_rate_hz:
        calib = _Recording(pid, Path(f"{stem}.native.speedscope.json"), True, mine.native_rate_hz)
        specs.append((calib, pyspy.record_command(pid, str(calib.path), duration,
                                                  mine.native_rate_hz, native=True,
                                                  fmt="speedscope")))
    for recording, cmd in specs:
        recorders.append(_start_recorder(cmd, opener=opening and not recording.native))
        recordings.append(recording)


@dataclass
class _Session:
    """What capture's `finally` must undo or check, whichever way the capture ends."""

    before: dict[int, target_state.ProcessState] = field(default_factory=dict)
    checked: list[int] = field(default_factory=list)  # further pids whose state is checked after
    recorders: list[_Recorder] = field(default_factory=list)
    temp_dir: Path | None = None
    sampler: TreeSampler | None = None
    task_samplers: dict[int, AsyncioTaskSampler] = field(default_factory=dict)


def capture(pids: int | list[int], work_dir: Path, options: AttachOptions,
            on_progress: Callable[[float, int], None] | None = None,
            stop: StopSignals | None = None,
            warn: Callable[[str], None] | None = None,
            busy_since: activity.CpuSnapshot | None = None) -> Capture:
    """Runs the window: the recorders of the sampling plan and the /proc sampler side by side,
    over every named pid and (unless `options.children` is off) its descendants.
    `on_progress(fraction, threads)` is called on every /proc tick. `stop` handles SIGINT,
    SIGTERM and SIGHUP (installed here for the capture when not given). On every way out the
    recorders are reaped, the temporary files of a failed capture removed, and every sampled
    process left running unless it was stopped before the attach; `warn` hears of each process
    that had to be resumed (the report's notes too). `busy_since`: the threads' CPU read earlier
    by the caller (the sampling plan measures activity from it: a read at least
    activity.MIN_INTERVAL_S before the plan spares that wait), else read before the probes."""
    pids = [pids] if isinstance(pids, int) else list(dict.fromkeys(pids))
    stop = stop if stop is not None else StopSignals()
    installed_here = stop.install()
    session = _Session(recorders=stop.recorders)
    result = None
    try:
        procs = [describe_target(pid) for pid in pids]
        family = list(pids)
        for pid in pids:
            family.extend(tree.descendants(pid))
        session.before = target_state.snapshot(family)  # before any py-spy touches the target
        for pid in pids:
            _refuse_stopped(session.before.get(pid))
        with priority.in_window():
            result = _capture(pids, procs, work_dir, options, on_progress, stop, session, busy_since)
        return result
    finally:
        with _signals_deferred():  # a second Ctrl-C now would skip the checks below
            _reap(session.recorders)
            for task_sampler in session.task_samplers.values():
                task_sampler.stop(timeout=0)  # already stopped on the way out of a window
            if session.sampler is not None:
                session.checked.extend(session.sampler.pids)
            # Only once the states were recorded: before that no py-spy has run, and a process
            # stopped now was stopped by someone else.
            checked = [*pids, *session.checked] if session.before else []
            for message in target_state.restore(session.before, checked):
                if result is not None:
                    result.notes.append(message)
                if warn is not None:
                    warn(f"warning: {message}")
            if result is None and session.temp_dir is not None:
                shutil.rmtree(session.temp_dir, ignore_errors=True)
            if installed_here:
                stop.uninstall()


@contextmanager
def _signals_deferred():
    """Holds SIGINT, SIGTERM and SIGHUP back until the block is done (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _capture(pids: list[int], procs: list[psutil.Process], work_dir: Path, options: AttachOptions,
             on_progress: Callable[[float, int], None] | None, stop: StopSignals,
             session: _Session, busy_since: activity.CpuSnapshot | None = None) -> Capture:
    """One window, phase by phase: probe the targets, plan the sampling, launch the recorders and
    the /proc sampler, wait out the window, stop everything, and summarise what was taken. Each
    phase hands the next a frozen record; `session` holds what capture's `finally` undoes."""
    run = _Run(pids, options, stop, session, notes=[], busy_since=busy_since)
    probed = _probe(run, procs)
    tree_plan = _plan(run, probed)
    launched = _launch(run, probed, tree_plan, _make_temp_dir(run, work_dir))
    clock = _wait_window(run, probed, launched, on_progress)
    stopped = _stop(run, launched, clock)
    return _summarise(run, probed, launched, stopped)


@dataclass(frozen=True)
class _Run:
    """What every phase of one window reads: the named pids, the options, the signal handler,
    what capture's `finally` undoes, and the report's notes (kept in the order they were made)."""

    pids: list[int]
    options: AttachOptions
    stop: StopSignals
    session: _Session
    notes: list[str]
    busy_since: activity.CpuSnapshot | None = None  # the caller's early read (capture)


@dataclass(frozen=True)
class _Probed:
    """What the probes found, before anything is launched."""

    probe: pyspy.ProbeResult  # the first named pid's (its Python version is the report's)
    native: bool  # py-spy can unwind native frames of the target
    members: list[int]  # the Python processes to record
    busy_before: activity.CpuSnapshot  # CPU per thread before the probes (plan.py shares by it)
    cmdline: list[str]
    threads: int | None


@dataclass(frozen=True)
class _Launched:
    """The recorders and the /proc sampler running, and what the window's costs are measured
    from. `members` and `recordings` grow in the window (processes born in it are recorded)."""

    tree_plan: TreePlan
    temp_dir: Path  # where py-spy writes
    sampler: TreeSampler
    members: list[int]
    recordings: list[_Recording]  # recordings[i] is what session.recorders[i] writes
    openers: list[_Recorder]  # the main recorders launched with the window: its clock waits
    at: float  # time.monotonic() of the launch
    children_before: resource.struct_rusage  # the reaped children's CPU (py-spy's) before it
    observer_before: observer_cpu.CpuReading | None  # the observer's own CPU before it
    pyspy_version: pyspy.VersionQuery  # asked beside the window, read after it


@dataclass(frozen=True)
class _Clock:
    """When the window's clock started (START_WAIT_S)."""

    start: float | None  # time.monotonic(); None when cut short before every recorder sampled
    started: float  # the same instant by the wall clock (time.time()), the report's start


@dataclass(frozen=True)
class _Stopped:
    """Everything stopped and read: the window's span, the recorders' outputs, the costs."""

    interrupted_by: int | None  # the signal that cut the window short
    task_recordings: dict[int, TaskRecording]
    outputs: list[str]  # outputs[i] is what session.recorders[i] printed
    tree_record: TreeRecord
    window_start: float  # time.monotonic(): the clock's start, else the launch
    started: float  # the clock's start by the wall clock (time.time()), the report's start
    elapsed: float  # seconds of window sampled
    killed: list[_Recorder]  # recorders someone else killed
    observer_after: observer_cpu.CpuReading | None
    pyspy_cpu_s: float  # py-spy's own CPU: on a small box it competes with the target

    @property
    def signame(self) -> str:
        return signal.Signals(self.interrupted_by).name if self.interrupted_by is not None else ""


@dataclass(frozen=True)
class _NativeProfiles:
    """The sparse native calibration's counts and the files that hold its samples."""

    samples: int | None = None
    errors: int | None = None
    paths: list[Path] = field(default_factory=list)


_MainOutput = tuple[_Recording, str, "_Recorder"]  # a main recording, its output, its recorder
_Counts = tuple[_Recording, tuple[int | None, int | None]]  # its (samples, errors) as py-spy said


def _probe(run: _Run, procs: list[psutil.Process]) -> _Probed:
    """Finds the Python process behind each named pid (a launcher's child), refuses one stopped,
    proves each readable (the first one's native unwinding too), and reads the root's command."""
    pids, options, session = run.pids, run.options, run.session
    probe_pids = [resolve_probe_pid(pid, options.children, options.retry_s) for pid in pids]
    for probe_pid in probe_pids:
        if probe_pid not in pids:
            _refuse_stopped(session.before.get(probe_pid) or target_state.process_state(probe_pid))
    session.checked.extend(probe_pids)
    members = _python_members(pids, options.children) or list(probe_pids)
    # CPU per thread around the probes: which processes are busy (plan.py shares by it).
    before = activity_since(run.busy_since, members)
    # The default plan's main recorders are non-blocking: only its calibration takes native
    # frames, and the calibration's own recorders say whether py-spy can unwind the target.
    probe, native = probe_target(probe_pids[0], options.native, options.retry_s, run.notes, _deferred(options))
    for other in probe_pids[1:]:
        wait_until_readable(other, options.retry_s)
    try:
        # Secrets masked as read: the command line is kept (`--keep-raw`, the .sampling.json) and
        # the analysis needs only its program names and flags, which redaction keeps.
        cmdline = kept_argv(procs[0].cmdline())
        threads = procs[0].num_threads()
    except psutil.NoSuchProcess:
        raise NoSuchProcess(f"process {pids[0]} exited before it could be sampled")
    except psutil.AccessDenied:
        cmdline, threads = [], None
    return _Probed(probe, native, members, before, cmdline, threads)


def activity_since(early: activity.CpuSnapshot | None, members: list[int]) -> activity.CpuSnapshot:
    """The read the sampling plan measures activity from: the caller's earlier one when it holds
    every member (a process missing from it would count as busy), else one taken now."""
    if early is not None and set(members) <= set(early.cpu):
        return early
    return activity.snapshot(members)


def _plan(run: _Run, probed: _Probed) -> TreePlan:
    """Each member's rate by how busy it was around the probes (plan.py)."""
    return plan_tree(activity.measure(probed.busy_before, probed.members), run.options.rate,
                     probed.native, cores=cores_available(run.pids[0]),
                     duration_s=run.options.duration)


def _make_temp_dir(run: _Run, work_dir: Path) -> Path:
    """The directory py-spy writes into: a hidden one in the output directory (the report then
    moves its profile out, on the same file system), removed on every way out (capture)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    run.session.temp_dir = Path(tempfile.mkdtemp(prefix=".diagnose-", dir=work_dir))
    return run.session.temp_dir


def _launch(run: _Run, probed: _Probed, tree_plan: TreePlan, temp_dir: Path) -> _Launched:
    """Starts every member's recorders and task sampler, then the /proc sampler. From here a
    first signal ends the window and the report is written (stop.graceful)."""
    options, session = run.options, run.session
    recordings: list[_Recording] = []
    sampler = TreeSampler(run.pids, children=options.children, kernel_waits=options.kernel_waits,
                          followed=options.followed)
    session.sampler = sampler
    at = time.monotonic()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The observer's own CPU (this process and every child) from here to the window's end.
    observer_before = observer_cpu.read()
    recorders = session.recorders
    run.stop.graceful = True  # from here a first signal ends the window and the report is written
    for pid in probed.members:
        _start_recordings(pid, tree_plan, probed.native, options.duration, temp_dir, recorders,
                          recordings, opening=True)
    # After every recorder: a task sampler's thread locating the runtime in the binary holds
    # the GIL, and each launch after it waited (5 launches took 0.13 s beside them, 0.065 s ahead of them).
    for pid in probed.members:
        _start_task_sampler(pid, options, session)
    version = pyspy.VersionQuery()  # after the launches too: its thread forks
    # The window's clock waits for these to say they sample (START_WAIT_S).
    openers = [r for rec, r in zip(recordings, recorders) if not rec.native]
    sampler.start()
    sampler.new_pids.clear()  # the members found by the sampler's first scan are recorded
    return _Launched(tree_plan, temp_dir, sampler, list(probed.members), recordings, openers,
                     at, children_before, observer_before, version)


def _wait_window(run: _Run, probed: _Probed, launched: _Launched,
                 on_progress: Callable[[float, int], None] | None) -> _Clock:
    """The window's loop, one /proc tick a turn: starts the clock once the recorders sample,
    records processes born in the window, tells each recorder to stop as the window closes, and
    ends when all have exited (not before the window's end where each was told to stop ahead of
    it: the /proc sampler covers the window asked for), one was killed, a signal came, or py-spy
    overran its grace."""
    options, stop, recorders = run.options, run.stop, run.session.recorders
    sampler, recordings = launched.sampler, launched.recordings
    deadline = launched.at + START_WAIT_S + options.duration + RECORD_GRACE_S
    window_start: float | None = None  # time.monotonic() when the clock started
    started = time.time()
    while stop.signum is None:
        closing = window_start + options.duration if window_start is not None else None
        if not _note_exits(recorders) and not _told_to_stop_before(recorders, closing):
            break  # every recorder has exited: at the window's end, or on its own (the target's)
        if _killed(recorders):  # someone killed py-spy: the others write what they have
            _interrupt(recorders)
            break
        now = time.monotonic()
        if window_start is None:
            window_start = _clock_start(launched.openers, launched.at, now)
            if window_start is not None:
                started = time.time() - (now - window_start)
                for recorder in launched.openers:  # one still silent samples at the service's
                    recorder.settle_priority()
                sampler.window_opened()
        end = window_start + options.duration if window_start is not None else None
        if end is None or now < end:  # the /proc sampler covers the window, not the exits after
            sampler.tick()
        _record_newcomers(run, probed, launched, end - now if end is not None else options.duration)
        if on_progress:
            fraction = 0.0 if window_start is None else (now - window_start) / options.duration
            on_progress(min(1.0, fraction), sampler.thread_count())
        if end is not None:
            _close_window(recordings, recorders, end, options.duration, now)
        if time.monotonic() > deadline:
            _interrupt(recorders)
            run.notes.append("py-spy did not finish in time and was stopped")
            break
        _wait_for_next(launched.openers if window_start is None else [], recordings, recorders,
                       end, options.duration, launched.tree_plan.sampling.proc_interval_s)
    return _Clock(window_start, started)


def _record_newcomers(run: _Run, probed: _Probed, launched: _Launched, left: float) -> None:
    """Processes the /proc sampler found born mid-window: recorded from now on, at the busy
    rate, when at least a second of the window is `left`."""
    for pid in launched.sampler.new_pids:
        if pid not in launched.members and left >= 1.0:
            launched.members.append(pid)
            _start_recordings(pid, launched.tree_plan, probed.native, left, launched.temp_dir,
                              run.session.recorders, launched.recordings)
            _start_task_sampler(pid, run.options, run.session)
    launched.sampler.new_pids.clear()


def _stop(run: _Run, launched: _Launched, clock: _Clock) -> _Stopped:
    """Stops the task samplers, reads each recorder's output once it has written, finishes the
    /proc sampler, and measures the window's span and what it cost."""
    options, stop, recorders = run.options, run.stop, run.session.recorders
    interrupted_by = stop.signum
    if interrupted_by is not None:
        _interrupt(recorders)  # again: one started after the handler ran would not have heard it
    task_recordings = {pid: s.stop() for pid, s in run.session.task_samplers.items()}
    outputs = [_collect(r) for r in recorders]
    tree_record = launched.sampler.finish()
    # stop.at is set with stop.signum, by the handler
    window_end = stop.at if interrupted_by is not None and stop.at is not None else time.monotonic()
    window_start = clock.start
    if window_start is None:  # cut short before every recorder said it samples
        window_start = launched.at
    else:
        window_end = min(window_end, window_start + options.duration)
    elapsed = max(0.0, window_end - window_start)
    killed = _killed(recorders)
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Every recorder has been reaped: their CPU is in the reaped children's.
    observer_after = observer_cpu.read()
    before = launched.children_before
    pyspy_cpu_s = ((children_after.ru_utime + children_after.ru_stime)
                   - (before.ru_utime + before.ru_stime))
    return _Stopped(interrupted_by, task_recordings, outputs, tree_record, window_start,
                    clock.started, elapsed, killed, observer_after, pyspy_cpu_s)


def _summarise(run: _Run, probed: _Probed, launched: _Launched, stopped: _Stopped) -> Capture:
    """What the window took, as the report's Capture: the notes on how it ended, the profiles
    written (the named pids' first), the native calibration, and the account of the sampling."""
    pids, options = run.pids, run.options
    tree_record = stopped.tree_record
    outputs, recorders = stopped.outputs, run.session.recorders
    mains = [(rec, out, r) for rec, out, r in zip(launched.recordings, outputs, recorders)
             if not rec.native]
    natives = [(rec, out) for rec, out in zip(launched.recordings, outputs) if rec.native]
    counts = [(rec, pyspy.parse_record_summary(out)) for rec, out, _ in mains]
    # Sampling a launcher's tree with --no-children cannot happen (resolve_probe_pid refused it);
    # a launcher's Python children are sampled, each by its own recorder.
    subprocesses = options.children
    # Only the roots' exits end the window early; a worker that exits is followed, not fatal.
    target_exited = all(tree_record.records[pid].target_exited for pid in pids) or (
        len(pids) == 1 and not subprocesses
        and any("process exited" in out for rec, out, _ in mains if rec.pid == pids[0]))
    recorder_failure = _recorder_failure(stopped.killed, stopped.elapsed, options.duration)
    _note_window_end(run, launched, stopped, _sum_known(c[0] for _, c in counts), target_exited,
                     recorder_failure)
    written = _written_profiles(run, stopped, mains, counts, target_exited, recorder_failure)
    pthread_ids.name_threads(tree_record, written)  # while the processes still run
    native_profiles = _native_profiles(natives, run.notes)
    record = tree_record.root_record
    target = Target(pid=pids[0], pids=tuple(pids), python=probed.probe.python_version,
                    cmdline=redact_cmdline(list(probed.cmdline)), threads=probed.threads,
                    cores=record.cores, cpu_quota_cores=record.cpu_quota_cores,
                    children=options.children)
    sampling = _sampling(run, probed, launched, stopped, counts, native_profiles)
    native_paths = native_profiles.paths
    return Capture(written[0], record, target, sampling, stopped.started,
                   partial=target_exited or stopped.interrupted_by is not None
                   or bool(stopped.killed),
                   notes=run.notes, argv=tuple(probed.cmdline),
                   native_profile_path=native_paths[0] if native_paths else None,
                   tree=tree_record, extra_profile_paths=written[1:],
                   extra_native_paths=native_paths[1:], interrupted_by=stopped.interrupted_by,
                   recorder_failure=recorder_failure, temp_dir=run.session.temp_dir,
                   task_recordings=stopped.task_recordings)


def _recorder_failure(killed: list[_Recorder], elapsed: float, duration: float) -> str | None:
    """Which recorders someone else killed, by signal, and when; None when none was."""
    if not killed:
        return None
    by_signal: dict[str, list[str]] = {}
    for r in killed:
        by_signal.setdefault(_signal_name(-r.returncode), []).append(str(r.pid))
    return ("py-spy was killed by " + ", ".join(
        f"{name} (pid{'s' if len(rs) > 1 else ''} {', '.join(rs)})"
        for name, rs in by_signal.items())
        + f" {elapsed:.1f} s into the {duration:g} s window")


def _note_window_end(run: _Run, launched: _Launched, stopped: _Stopped,
                     samples_taken: int | None, target_exited: bool,
                     recorder_failure: str | None) -> None:
    """The notes on how the window went, in this order: recorders that fell behind, the signal
    or the target's exit that cut it short, a recorder killed, workers that exited in it."""
    options, notes = run.options, run.notes
    interrupted_by, elapsed = stopped.interrupted_by, stopped.elapsed
    planned_end = stopped.window_start + options.duration
    behind = [(rec, lag) for rec, out, r in zip(launched.recordings, stopped.outputs,
                                                run.session.recorders)
              if (lag := _lag_s(out, r, planned_end)) is not None]
    if behind and interrupted_by is None:
        notes.append(_late_note(behind, samples_taken))
    if interrupted_by is not None:
        notes.append(f"the window was cut short by {stopped.signame} after {elapsed:.1f} s of the "
                     f"{options.duration:g} s asked: the report uses the samples taken until then")
    elif target_exited:
        notes.append(f"the target exited {elapsed:.1f} s into the {options.duration:g} s window: "
                     f"the report uses the samples taken until then")
    if recorder_failure is not None:
        notes.append(recorder_failure + ": the report uses the samples the others wrote")
    workers_gone = [pid for pid, rec in stopped.tree_record.records.items()
                    if rec.target_exited and pid not in run.pids]
    if workers_gone:
        notes.append(f"{len(workers_gone)} child process(es) exited during the window "
                     f"({', '.join(map(str, workers_gone[:8]))}): their samples until then are kept")


def _written_profiles(run: _Run, stopped: _Stopped, mains: list[_MainOutput],
                      counts: list[_Counts], target_exited: bool,
                      recorder_failure: str | None) -> list[Path]:
    """The main recordings that hold samples, the named pids' first (the report is named after
    the first). None is the capture's failure, raised as its cause: the signal, py-spy killed,
    the target gone, or py-spy's own error."""
    notes = run.notes
    ordered = sorted(mains, key=lambda m: m[0].pid not in run.pids)
    written = [rec.path for rec, _, _ in ordered if rec.path.exists() and rec.path.stat().st_size > 0]
    # A process sampled at a low rate (an idle master at 1 Hz) can reach the window's close
    # before its recorder's first sample: its file holds no profile. The others carry the report.
    sampled_none = {rec.path for rec, (n, _) in counts if n == 0}
    if any(path not in sampled_none for path in written):
        left_out = sorted(rec.pid for rec, _, _ in ordered if rec.path in sampled_none
                          and rec.path in written)
        written = [path for path in written if path not in sampled_none]
        if left_out:
            notes.append(f"py-spy took no sample of pid {', '.join(map(str, left_out))} before "
                         f"the window closed (sampled at a low rate): left out of the report")
    if written:
        return written
    if stopped.interrupted_by is not None:
        raise run.stop.error(f"interrupted by {stopped.signame} {stopped.elapsed:.1f} s into the "
                             f"window, before py-spy wrote any sample: no report written")
    _, first_out, first_recorder = ordered[0] if ordered else (None, "", None)
    if stopped.killed and first_recorder in stopped.killed:
        raise ProfilerFailed(f"{recorder_failure}: no profile was written")
    if target_exited:
        raise NoSamples(f"process {run.pids[0]} exited before py-spy took any sample")
    code = first_recorder.returncode if first_recorder is not None else None
    raise ProfilerFailed(f"py-spy wrote no profile (exit {code}): "
                         f"{pyspy.first_error_line(first_out)}")


def _native_profiles(natives: list[tuple[_Recording, str]], notes: list[str]) -> _NativeProfiles:
    """The native calibration's counts, and its files that hold samples, each tagged with its
    process (one that cannot be tagged is left out)."""
    if not natives:
        return _NativeProfiles()
    native_counts = [(rec, pyspy.parse_record_summary(out)) for rec, out in natives]
    # A window cut short can end before the sparse native recorder took a sample: its file
    # then holds no profile, and the report goes on without it.
    native_paths = [rec.path for rec, (n, _) in native_counts
                    if rec.path.exists() and rec.path.stat().st_size > 0 and n != 0]
    for rec, _ in native_counts:
        if rec.path in native_paths:
            try:
                pyspy.tag_speedscope_process(str(rec.path), rec.pid)
            except (OSError, ValueError):
                native_paths.remove(rec.path)
    if not native_paths:
        # py-spy's own words where it could not unwind the target (no probe asked it first)
        errors = [pyspy.first_error_line(out) for _, out in natives
                  if any(line.strip().startswith("Error:") for line in out.splitlines())]
        notes.append(f"native frames unavailable ({errors[0]}): thread state inferred from Python frames "
                     f"only, and marked estimated" if errors else
                     "the native recorder wrote nothing: thread states are estimated from Python frames "
                     "and OS counters")
    return _NativeProfiles(_sum_known(c[0] for _, c in native_counts),
                           _sum_known(c[1] for _, c in native_counts), native_paths)


def _sampling(run: _Run, probed: _Probed, launched: _Launched, stopped: _Stopped,
              counts: list[_Counts], natives: _NativeProfiles) -> CaptureSampling:
    """The report's account of the sampling: the plan, the mode, the samples and py-spy's and
    the observer's own cost over the window."""
    options, elapsed = run.options, stopped.elapsed
    # where no native probe ran (probe_target's `deferred`), the calibration's samples are the proof
    planned = any(p.native_rate_hz for p in launched.tree_plan.processes)
    native = probed.native and (bool(natives.paths) or not planned or not _deferred(options))
    tree_plan = launched.tree_plan if native else without_native(launched.tree_plan)
    plan = tree_plan.sampling
    record = stopped.tree_record.root_record
    # The analysis reads every recording on one grid at the busy rate; an idle process's stack
    # holds between its samples, so its count is what the busy rate would have taken.
    samples = _sum_known(round(c[0] * plan.rate_hz / rec.rate_hz) if c[0] is not None else None
                         for rec, c in counts)
    mode = ("nonblocking" if plan.nonblocking else "blocking") + (
        "+native" if native and not plan.nonblocking else "")
    if natives.paths:
        mode += f" + native calibration at {plan.native_rate_hz} Hz"
    if options.children:  # subprocesses: each Python child by its own recorder
        mode += f" + subprocesses ({len(launched.members)} recorded)"
    return CaptureSampling(
        duration_s=round(min(elapsed, options.duration + RECORD_GRACE_S), 3),
        requested_duration_s=options.duration, rate_hz=plan.rate_hz,
        plan=plan.reason, proc_interval_s=round(plan.proc_interval_s, 3),
        samples=samples, samples_taken=_sum_known(c[0] for _, c in counts),
        errors=_sum_known(c[1] for _, c in counts),
        native=native,
        native_rate_hz=plan.native_rate_hz or None,
        native_samples=natives.samples, native_errors=natives.errors,
        mode=mode,
        processes_planned=tuple(tree_plan.processes),
        processes_sampled=len(stopped.tree_record.records),
        pyspy_version=launched.pyspy_version.answer(),
        pyspy_cpu_s=round(stopped.pyspy_cpu_s, 3),
        pyspy_cpu_share_of_cores=round(stopped.pyspy_cpu_s / (max(elapsed, 1e-3) * record.cores), 4),
        cpu=observer_cpu.window_cpu(launched.observer_before, stopped.observer_after,
                                    stopped.tree_record))


def _deferred(options: AttachOptions) -> bool:
    """The default plan: native unwinding is proven by the calibration, not by a probe."""
    return options.native == "auto" and options.rate is None


def _start_task_sampler(pid: int, options: AttachOptions, session: _Session) -> None:
    """Reads the process's asyncio tasks from its memory beside the stack recorders (a
    background thread; an unreadable process is a note in its recording, never a failure)."""
    if options.async_tasks and pid not in session.task_samplers:
        session.task_samplers[pid] = AsyncioTaskSampler(pid).start()


def _sum_known(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _clock_start(openers: list[_Recorder], launched: float, now: float) -> float | None:
    """When the window's clock starts: once every recorder launched with it says it samples (the
    last one's word), or START_WAIT_S after the launch for one that has not (starved or failing:
    it does not hold the window back); None while waiting."""
    for recorder in openers:
        recorder.read_head()
    if any(r.sampling_since is None and r.poll() is None for r in openers):
        return now if now - launched >= START_WAIT_S else None
    return max((r.sampling_since for r in openers if r.sampling_since is not None), default=now)


def _close_window(recordings: list[_Recording], recorders: list[_Recorder], end: float,
                  duration: float, now: float) -> None:
    """Tells each recorder still sampling to stop once its lead before the window's `end` is
    reached (stop_lead_s), at diagnose's priority: its last sample and its writing then run now,
    not starved for seconds beside a service that saturates the cores."""
    for recording, recorder in zip(recordings, recorders):
        if (recorder.stop_sent_at is None and recorder.poll() is None
                and now >= _stop_at(recording, end, duration)):
            priority.lift_process(recorder.pid)
            recorder.stop_sent_at = now
            _interrupt([recorder])  # it writes what it has; the loop waits for it to exit


EXIT_POLL_S = 0.02  # how often a closed window checks its recorders' exits
LATE_EXIT_S = 1.0  # a recorder still sampling this long after the window's end lagged


def _wait_for_next(openers: list[_Recorder], recordings: list[_Recording],
                   recorders: list[_Recorder], end: float | None, duration: float,
                   interval: float) -> None:
    """Sleeps until the next /proc tick, or sooner: a waited-for recorder's first words (the
    clock's start), a recorder's stop time, or (the window closed) a recorder's exit."""
    if end is None:
        pending = [r.stdout for r in openers if r.sampling_since is None and r.stdout is not None
                   and not r.stdout.closed]
        if pending:
            select.select(pending, [], [], interval)
        else:
            time.sleep(interval)
        return
    now = time.monotonic()
    if now >= end:  # every recorder has been told to stop: waiting for their exits
        time.sleep(EXIT_POLL_S)
        return
    stops = [_stop_at(rec, end, duration) for rec, r in zip(recordings, recorders)
             if r.stop_sent_at is None and r.poll() is None]
    time.sleep(max(0.0, min(interval, end - now, *(at - now for at in stops))))


def _told_to_stop_before(recorders: list[_Recorder], end: float | None) -> bool:
    """Every recorder was told to stop ahead of the window's `end` (its stop lead) and the end
    is still to come: the /proc sampler covers the rest of the window asked for."""
    return (end is not None and time.monotonic() < end
            and all(r.stop_sent_at is not None for r in recorders))


def _stop_at(recording: _Recording, end: float, duration: float) -> float:
    """When a recorder is told to stop: its lead before the window's `end` (plan.stop_lead_s)."""
    return end - stop_lead_s(recording.rate_hz, duration)


def _note_exits(recorders: list[_Recorder]) -> bool:
    """Notes when each recorder was first seen gone; True while any still runs."""
    now = time.monotonic()
    running = False
    for recorder in recorders:
        if recorder.poll() is None:
            running = True
        elif recorder.exited_at is None:
            recorder.exited_at = now
    return running


def _lag_s(output: str, recorder: _Recorder, planned_end: float) -> float | None:
    """How far a recorder fell behind, where it did: the lag py-spy reported, or how long past
    the window's end it took to stop (it stops at its next sample: LATE_EXIT_S past the end is
    a recorder starved of CPU, not its rate's wait)."""
    reported = _behind_s(output)
    exited = recorder.exited_at
    late = exited - planned_end if exited is not None and exited - planned_end > LATE_EXIT_S else None
    lags = [lag for lag in (reported, late) if lag is not None]
    return max(lags) if lags else None


def _behind_s(output: str) -> float | None:
    """The largest lag py-spy reported in its output ("1.20s behind in sampling"), or None."""
    units = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
    lags = [float(n) * units[u] for n, u in _BEHIND.findall(output)]
    return max(lags) if lags else None


def _late_note(behind: list[tuple[_Recording, float]], samples_taken: int | None) -> str:
    """What py-spy's lag cost, by which recorders lagged: the sparse native calibration's lag
    leaves the Python samples whole; a main recorder's lag thins them."""
    def pids(recs: list[_Recording]) -> str:
        return ", ".join(str(p) for p in sorted({r.pid for r in recs}))

    mains = [r for r, _ in behind if not r.native]
    lag = max(lag for _, lag in behind)
    if not mains:
        return (f"py-spy's native calibration of pid {pids([r for r, _ in behind])} fell behind "
                f"its rate by up to {lag:.1f} s (starved of CPU): the Python samples are "
                f"complete, the native ones fewer")
    taken = f"the {samples_taken} samples" if samples_taken is not None else "the samples"
    return (f"py-spy fell behind its planned rate on pid {pids(mains)} by up to {lag:.1f} s "
            f"(starved of CPU): shares are read from {taken} it took")


def _killed(recorders: list[_Recorder]) -> list[_Recorder]:
    """Recorders someone else killed. Not those we killed for overrunning (`_collect`), nor a
    SIGINT death: py-spy handles SIGINT once started (writes, exits 0), so that was ours
    reaching one still starting."""
    return [r for r in recorders
            if r.returncode is not None and r.returncode < 0 and -r.returncode != signal.SIGINT
            and not r.killed_by_diagnose]


def _signal_all(recorders: list[_Recorder], signum: int) -> None:
    """Signals each recorder still running. Never waits: safe inside a signal handler."""
    for recorder in list(recorders):
        try:
            if recorder.returncode is None:
                recorder.send_signal(signum)
        except OSError:
            pass


def _interrupt(recorders: list[_Recorder]) -> None:
    _signal_all(recorders, signal.SIGINT)  # py-spy writes what it has on SIGINT


def _reap(recorders: list[_Recorder]) -> None:
    """Kills every recorder still running and waits for it: none outlives the capture."""
    _signal_all(recorders, signal.SIGKILL)
    for recorder in recorders:
        try:
            recorder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for pipe in (recorder.stdout, recorder.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass


_PRCTL: Callable[..., int] | None
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None
_PR_SET_PDEATHSIG = 1
# util-linux's setpriv (every Debian and most distributions): asks for the death signal, then
# execs py-spy (_start_recorder).
_SETPRIV = shutil.which("setpriv")


class _Recorder(subprocess.Popen[str]):
    """A py-spy recorder; `killed_by_diagnose` once we killed it for overrunning (`_collect`).
    Its stdout is read as it comes (`read_head`) until py-spy says it samples: `sampling_since`
    is when that line was read (time.monotonic()), None before."""

    killed_by_diagnose = False
    sampling_since: float | None = None
    stop_sent_at: float | None = None  # when the window's close was signalled to it
    exited_at: float | None = None  # when the capture loop saw it gone
    restore_when_sampling = False  # started at diagnose's priority: the service's once it samples
    head = ""  # what stdout said before `_collect` read the rest

    def settle_priority(self) -> None:
        """A recorder started at diagnose's priority (_start_recorder) goes back to the one
        diagnose started with: once it samples, or once the clock started without it."""
        if self.restore_when_sampling:
            self.restore_when_sampling = False
            priority.restore_process(self.pid)

    def read_head(self) -> None:
        """Reads what py-spy printed so far, without blocking; notes when it began sampling."""
        if self.sampling_since is not None or self.stdout is None:
            return
        try:
            chunk = os.read(self.stdout.fileno(), 65536)
        except (BlockingIOError, OSError, ValueError):
            return
        self.head += chunk.decode("utf-8", "replace")
        if "Sampling process" in self.head:
            self.sampling_since = time.monotonic()
            self.settle_priority()
        if self.sampling_since is not None or not chunk:
            os.set_blocking(self.stdout.fileno(), True)  # `_collect` reads the rest


def _start_recorder(cmd: list[str], opener: bool = False) -> _Recorder:
    """A py-spy recorder in its own session: the Ctrl-C of a terminal, `timeout`'s SIGTERM to our
    process group and a hangup do not reach it (py-spy dies on SIGTERM without writing anything);
    we forward one SIGINT instead. Should diagnose itself be killed (SIGKILL), the kernel sends
    the recorder SIGINT too, so it never outlives us by more than its last write.

    An `opener` (a recorder the window's clock waits for) starts through util-linux's setpriv,
    which asks for that signal and execs py-spy: no Python runs in the child, so the launch forks
    nothing (vfork; 0.3 ms against 4-7 ms a recorder on a saturated 2-core box), and py-spy
    loads the target's symbols at diagnose's priority, ahead of the clock; once it says it
    samples, it goes back to the priority diagnose started with (`read_head`), so the sampling
    disturbs the service as it always did. The others, and every recorder where setpriv is
    missing, ask for the signal and take that priority in the child, before py-spy starts."""
    if opener and _SETPRIV is not None:
        recorder = _Recorder([_SETPRIV, "--pdeathsig", "INT", "--", *cmd], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        recorder.restore_when_sampling = True
    else:
        parent = os.getpid()

        def prepare_child() -> None:
            priority.restore_in_child()  # the sampling disturbs the service as it always did
            if _PRCTL is not None:
                _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)
            if os.getppid() != parent:  # we died before prctl took effect
                os.kill(os.getpid(), signal.SIGKILL)

        recorder = _Recorder(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, preexec_fn=prepare_child)
    if recorder.stdout is not None:
        os.set_blocking(recorder.stdout.fileno(), False)  # read_head: until it says it samples
    return recorder


def _collect(recorder: _Recorder) -> str:
    """py-spy's output (it prints its summary on stdout), after it has written its file."""
    if recorder.stdout is not None and not recorder.stdout.closed:
        os.set_blocking(recorder.stdout.fileno(), True)
    try:
        stdout, stderr = recorder.communicate(timeout=RECORD_GRACE_S)
    except subprocess.TimeoutExpired:
        recorder.killed_by_diagnose = True
        recorder.kill()
        stdout, stderr = recorder.communicate()
    return recorder.head + (stdout or "") + (stderr or "")
