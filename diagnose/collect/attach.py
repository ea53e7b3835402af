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

from diagnose.collect import pyspy
from diagnose.collect.plan import plan_sampling
from diagnose.collect.procfs import ProcRecord, ProcSampler
from diagnose.errors import NoSamples, NoSuchProcess, NotPython, ProfilerFailed

ATTACH_RETRY_S = 3.0  # a launcher or a just-started interpreter gets this long to become readable
RECORD_GRACE_S = 20.0  # py-spy's time to finish writing after the window


@dataclass
class AttachOptions:
    duration: float = 10.0
    rate: int | None = None  # None: chosen by the sampling plan from the thread count
    native: str = "auto"  # "auto", "on", "off"
    retry_s: float = ATTACH_RETRY_S


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


def describe_target(pid: int) -> psutil.Process:
    try:
        proc = psutil.Process(pid)
        proc.status()
        return proc
    except psutil.NoSuchProcess:
        raise NoSuchProcess(f"no process with pid {pid}")
    except psutil.AccessDenied:
        return psutil.Process(pid)


def looks_like_python(pid: int) -> bool:
    """Does the process map a Python interpreter? (exe name or a loaded libpython)."""
    try:
        proc = psutil.Process(pid)
        if "python" in os.path.basename(proc.exe() or "").lower():
            return True
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as fh:
            return any("libpython" in line or "/python" in line.rsplit(" ", 1)[-1] for line in fh)
    except (psutil.Error, OSError):
        return False


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
    if looks_like_python(pid):
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


def capture(pid: int, work_dir: Path, options: AttachOptions,
            on_progress: Callable[[float, int], None] | None = None) -> Capture:
    """Runs the window: the recorders of the sampling plan and the /proc sampler side by side.
    `on_progress(fraction, threads)` is called on every /proc tick."""
    proc = describe_target(pid)
    notes: list[str] = []
    probe, native = probe_target(pid, options.native, options.retry_s, notes)
    try:
        cmdline = proc.cmdline()
        threads = proc.num_threads()
    except psutil.NoSuchProcess:
        raise NoSuchProcess(f"process {pid} exited before it could be sampled")
    except psutil.AccessDenied:
        cmdline, threads = [], None

    plan = plan_sampling(threads, options.rate, native)
    work_dir.mkdir(parents=True, exist_ok=True)
    stem = work_dir / f".diagnose-{pid}-{os.getpid()}"
    profile_path = Path(f"{stem}.speedscope.json")
    native_path = Path(f"{stem}.native.speedscope.json") if plan.native_rate_hz else None
    commands = [pyspy.record_command(pid, str(profile_path), options.duration, plan.rate_hz,
                                     native=native and not plan.nonblocking,
                                     nonblocking=plan.nonblocking)]
    if native_path is not None:
        commands.append(pyspy.record_command(pid, str(native_path), options.duration,
                                             plan.native_rate_hz, native=True))
    sampler = ProcSampler(pid)
    started = time.time()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    recorders = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for cmd in commands]
    sampler.start()
    interrupted = False
    deadline = time.monotonic() + options.duration + RECORD_GRACE_S
    try:
        while any(r.poll() is None for r in recorders):
            sampler.tick()
            if on_progress:
                on_progress(min(1.0, (time.time() - started) / options.duration),
                            len(sampler.record.first))
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
    record = sampler.finish()
    elapsed = time.time() - started
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # py-spy's own CPU: on a small box it competes with the target for the same cores.
    pyspy_cpu_s = ((children_after.ru_utime + children_after.ru_stime)
                   - (children_before.ru_utime + children_before.ru_stime))
    samples, errors = pyspy.parse_record_summary(outputs[0])
    target_exited = record.target_exited or any("process exited" in o for o in outputs)
    if target_exited:
        notes.append(f"the target exited {elapsed:.1f} s into the {options.duration:g} s window: "
                     f"the report uses the samples taken until then")
    if not profile_path.exists() or profile_path.stat().st_size == 0:
        if target_exited:
            raise NoSamples(f"process {pid} exited before py-spy took any sample")
        raise ProfilerFailed(f"py-spy wrote no profile (exit {recorders[0].returncode}): "
                             f"{pyspy.first_error_line(outputs[0])}")
    native_samples = native_errors = None
    if native_path is not None:
        native_samples, native_errors = pyspy.parse_record_summary(outputs[1])
        if not native_path.exists() or native_path.stat().st_size == 0:
            notes.append("the native recorder wrote nothing: thread states are estimated from "
                         "Python frames and OS counters")
            native_path = None
    target = {"pid": pid, "python": probe.python_version, "cmdline": cmdline,
              "threads": threads, "cores": record.cores, "cpu_quota_cores": record.cpu_quota_cores}
    mode = ("nonblocking" if plan.nonblocking else "blocking") + (
        "+native" if native and not plan.nonblocking else "")
    if native_path is not None:
        mode += f" + native calibration at {plan.native_rate_hz} Hz"
    sampling = {"duration_s": round(min(elapsed, options.duration + RECORD_GRACE_S), 3),
                "requested_duration_s": options.duration, "rate_hz": plan.rate_hz,
                "plan": plan.reason, "proc_interval_s": round(plan.proc_interval_s, 3),
                "samples": samples, "errors": errors, "native": native,
                "native_rate_hz": plan.native_rate_hz or None,
                "native_samples": native_samples, "native_errors": native_errors,
                "mode": mode,
                "pyspy_version": pyspy.pyspy_version(),
                "pyspy_cpu_s": round(pyspy_cpu_s, 3),
                "pyspy_cpu_share_of_cores": round(pyspy_cpu_s / (max(elapsed, 1e-3) * record.cores), 4)}
    return Capture(profile_path, record, target, sampling, started,
                   partial=target_exited or interrupted, notes=notes, native_profile_path=native_path)


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
