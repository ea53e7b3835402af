"""Attaches to a live pid: probes it, then runs py-spy and the /proc sampler over one window."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil

from diagnose.collect import pyspy, tree
from diagnose.collect.plan import plan_sampling
from diagnose.collect.procfs import ProcRecord, TreeRecord, TreeSampler
from diagnose.errors import NoSamples, NoSuchProcess, NotPython, ProfilerFailed

ATTACH_RETRY_S = 3.0  # a launcher or a just-started interpreter gets this long to become readable
RECORD_GRACE_S = 20.0  # py-spy's time to finish writing after the window


@dataclass
class AttachOptions:
    duration: float = 10.0
    rate: int | None = None  # None: chosen by the sampling plan from the thread count
    native: str = "auto"  # "auto", "on", "off"
    retry_s: float = ATTACH_RETRY_S
    children: bool = True  # sample the pid's descendant processes too (--no-children: off)


@dataclass
class Capture:
    profile_path: Path
    proc: ProcRecord
    target: dict
    sampling: dict
    started_at: float
    partial: bool = False
    notes: list[str] = field(default_factory=list)
    native_profile_path: Path | None = None  # sparse native samples that calibrate the states
    tree: TreeRecord | None = None  # /proc records of every process sampled
    extra_profile_paths: list[Path] = field(default_factory=list)  # further named pids' recordings
    extra_native_paths: list[Path] = field(default_factory=list)


def describe_target(pid: int) -> psutil.Process:
    try:
        proc = psutil.Process(pid)
        proc.status()
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


def _safe_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def probe_target(pid: int, wanted: str, retry_s: float, notes: list[str]) -> tuple[pyspy.ProbeResult, bool]:
    """One successful `py-spy dump` proves the target readable; a native one also proves that
    native unwinding works (each dump pauses the target, so we take as few as we can)."""
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
    if tree.maps_python(pid):
        return pid
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


def _tree_size(pids: list[int], children: bool) -> tuple[int | None, int]:
    """(threads, processes) of everything that will be sampled, for the shared budget."""
    total, known, processes = 0, False, 0
    for pid in pids:
        members = [pid] + ([n.pid for n in tree.python_descendants(pid)] if children else [])
        for member in members:
            try:
                total += psutil.Process(member).num_threads()
                known = True
                processes += 1
            except psutil.Error:
                pass
    return (total if known else None), max(1, processes)


def capture(pids: int | list[int], work_dir: Path, options: AttachOptions,
            on_progress: Callable[[float, int], None] | None = None) -> Capture:
    """Runs the window: the recorders of the sampling plan and the /proc sampler side by side,
    over every named pid and (unless `options.children` is off) its descendants.
    `on_progress(fraction, threads)` is called on every /proc tick."""
    pids = [pids] if isinstance(pids, int) else list(dict.fromkeys(pids))
    procs = [describe_target(pid) for pid in pids]
    notes: list[str] = []
    probe_pids = [resolve_probe_pid(pid, options.children, options.retry_s) for pid in pids]
    probe, native = probe_target(probe_pids[0], options.native, options.retry_s, notes)
    for other in probe_pids[1:]:
        wait_until_readable(other, options.retry_s)
    root = pids[0]
    try:
        cmdline = procs[0].cmdline()
        threads = procs[0].num_threads()
    except psutil.NoSuchProcess:
        raise NoSuchProcess(f"process {root} exited before it could be sampled")
    except psutil.AccessDenied:
        cmdline, threads = [], None
    # Sampling a launcher's tree with --no-children cannot happen (resolve_probe_pid refused it);
    # a launcher's Python child is sampled through py-spy --subprocesses.
    subprocesses = options.children
    total_threads, processes = _tree_size(pids, options.children)
    plan = plan_sampling(total_threads or threads, options.rate, native, processes)
    work_dir.mkdir(parents=True, exist_ok=True)
    # The main recorders first, then the native ones: outputs are split by that order below.
    main_commands, native_commands, profile_paths, native_paths = [], [], [], []
    for pid in pids:
        stem = work_dir / f".diagnose-{pid}-{os.getpid()}"
        profile_paths.append(Path(f"{stem}.speedscope.json"))
        main_commands.append(pyspy.record_command(
            pid, str(profile_paths[-1]), options.duration, plan.rate_hz,
            native=native and not plan.nonblocking, nonblocking=plan.nonblocking,
            subprocesses=subprocesses))
        if plan.native_rate_hz:
            native_paths.append(Path(f"{stem}.native.speedscope.json"))
            native_commands.append(pyspy.record_command(
                pid, str(native_paths[-1]), options.duration, plan.native_rate_hz, native=True,
                subprocesses=subprocesses))
    commands = main_commands + native_commands
    sampler = TreeSampler(pids, children=options.children)
    started = time.time()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    recorders = []
    try:
        for cmd in commands:
            recorders.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
    except BaseException:
        _interrupt(recorders)
        for recorder in recorders:
            _collect(recorder)
        raise
    sampler.start()
    interrupted = False
    deadline = time.monotonic() + options.duration + RECORD_GRACE_S
    try:
        while any(r.poll() is None for r in recorders):
            sampler.tick()
            if on_progress:
                on_progress(min(1.0, (time.time() - started) / options.duration),
                            sampler.thread_count())
            if time.monotonic() > deadline:
                _interrupt(recorders)
                notes.append("py-spy did not finish in time and was stopped")
                break
            time.sleep(plan.proc_interval_s)
    except KeyboardInterrupt:
        interrupted = True
        _interrupt(recorders)  # py-spy writes what it has on Ctrl-C
        notes.append("sampling interrupted by the user before the window ended")
    outputs = [_collect(r) for r in recorders]
    tree_record = sampler.finish()
    elapsed = time.time() - started
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # py-spy's own CPU: on a small box it competes with the target for the same cores.
    pyspy_cpu_s = ((children_after.ru_utime + children_after.ru_stime)
                   - (children_before.ru_utime + children_before.ru_stime))
    main_outputs, native_outputs = outputs[:len(pids)], outputs[len(pids):]
    counts = [pyspy.parse_record_summary(o) for o in main_outputs]
    samples = _sum_known(c[0] for c in counts)
    errors = _sum_known(c[1] for c in counts)
    # Only the roots' exits end the window early; a worker that exits is followed, not fatal.
    target_exited = all(tree_record.records[pid].target_exited for pid in pids) or (
        len(pids) == 1 and not subprocesses and any("process exited" in o for o in main_outputs))
    if target_exited:
        notes.append(f"the target exited {elapsed:.1f} s into the {options.duration:g} s window: "
                     f"the report uses the samples taken until then")
    workers_gone = [pid for pid, rec in tree_record.records.items()
                    if rec.target_exited and pid not in pids]
    if workers_gone:
        notes.append(f"{len(workers_gone)} child process(es) exited during the window "
                     f"({', '.join(map(str, workers_gone[:8]))}): their samples until then are kept")
    written = [p for p in profile_paths if p.exists() and p.stat().st_size > 0]
    if not written:
        if target_exited:
            raise NoSamples(f"process {root} exited before py-spy took any sample")
        raise ProfilerFailed(f"py-spy wrote no profile (exit {recorders[0].returncode}): "
                             f"{pyspy.first_error_line(main_outputs[0])}")
    native_samples = native_errors = None
    if native_paths:
        native_counts = [pyspy.parse_record_summary(o) for o in native_outputs]
        native_samples = _sum_known(c[0] for c in native_counts)
        native_errors = _sum_known(c[1] for c in native_counts)
        native_paths = [p for p in native_paths if p.exists() and p.stat().st_size > 0]
        if not native_paths:
            notes.append("the native recorder wrote nothing: thread states are estimated from "
                         "Python frames and OS counters")
    record = tree_record.root_record
    target = {"pid": root, "pids": pids, "python": probe.python_version, "cmdline": cmdline,
              "threads": threads, "cores": record.cores, "cpu_quota_cores": record.cpu_quota_cores,
              "children": options.children}
    mode = ("nonblocking" if plan.nonblocking else "blocking") + (
        "+native" if native and not plan.nonblocking else "")
    if native_paths:
        mode += f" + native calibration at {plan.native_rate_hz} Hz"
    if subprocesses:
        mode += " + subprocesses"
    sampling = {"duration_s": round(min(elapsed, options.duration + RECORD_GRACE_S), 3),
                "requested_duration_s": options.duration, "rate_hz": plan.rate_hz,
                "plan": plan.reason, "proc_interval_s": round(plan.proc_interval_s, 3),
                "samples": samples, "errors": errors, "native": native,
                "native_rate_hz": plan.native_rate_hz or None,
                "native_samples": native_samples, "native_errors": native_errors,
                "mode": mode,
                "processes_sampled": len(tree_record.records),
                "pyspy_version": pyspy.pyspy_version(),
                "pyspy_cpu_s": round(pyspy_cpu_s, 3),
                "pyspy_cpu_share_of_cores": round(pyspy_cpu_s / (max(elapsed, 1e-3) * record.cores), 4)}
    for path in profile_paths:
        if path not in written and path.exists():
            path.unlink()
    return Capture(written[0], record, target, sampling, started,
                   partial=target_exited or interrupted, notes=notes,
                   native_profile_path=native_paths[0] if native_paths else None,
                   tree=tree_record, extra_profile_paths=written[1:],
                   extra_native_paths=native_paths[1:])


def _sum_known(values) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _interrupt(recorders: list[subprocess.Popen]) -> None:
    for recorder in recorders:
        if recorder.poll() is None:
            recorder.send_signal(signal.SIGINT)


def _collect(recorder: subprocess.Popen) -> str:
    """py-spy's output (it prints its summary on stdout), after it has written its file."""
    try:
        stdout, stderr = recorder.communicate(timeout=RECORD_GRACE_S)
    except subprocess.TimeoutExpired:
        recorder.kill()
        stdout, stderr = recorder.communicate()
    return (stdout or "") + (stderr or "")
