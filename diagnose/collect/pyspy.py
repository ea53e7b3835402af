"""Runs the real py-spy: locating the binary, probing a pid, and recording a window."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from dataclasses import dataclass

from diagnose.errors import NoSuchProcess, PermissionDenied, ProfilerFailed


def pyspy_binary() -> str:
    """py-spy installed beside this interpreter first (the venv we were installed into), then PATH."""
    scripts = sysconfig.get_path("scripts")
    candidate = os.path.join(scripts, "py-spy")
    if os.access(candidate, os.X_OK):
        return candidate
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("py-spy")
    if found:
        return found
    raise ProfilerFailed("py-spy is not installed: pip install py-spy")


class VersionQuery:
    """`py-spy --version`, asked on a thread of its own when the recorders start and read when
    the window has ended: asked after it, its start took 0.14 s of the path to the verdict
    beside a saturated tree. The thread reaps the child as soon as it exits."""

    def __init__(self) -> None:
        self._version = "unknown"
        self._thread = threading.Thread(target=self._ask, name="pyspy-version", daemon=True)
        self._thread.start()

    def _ask(self) -> None:
        try:
            out = subprocess.run([pyspy_binary(), "--version"], capture_output=True, text=True,
                                 timeout=10)
        except (OSError, subprocess.SubprocessError, ProfilerFailed):
            return
        self._version = out.stdout.strip().replace("py-spy ", "") or "unknown"

    def answer(self) -> str:
        """py-spy's version ("unknown" where it could not be asked)."""
        self._thread.join(timeout=10)
        return self._version


# py-spy's messages, matched to decide between "retry", "not python" and "no permission".
_NOT_READY = re.compile(r"Failed to find python version|Failed to find a python interpreter|"
                        r"Failed to get python version", re.I)
_GONE = re.compile(r"No such file or directory|No such process|Check that the process is running", re.I)
_PERMISSION = re.compile(r"Permission denied|Operation not permitted", re.I)
_PY_VERSION = re.compile(r"Python v(\d+\.\d+(?:\.\d+)?\S*)")


@dataclass(frozen=True)
class ProbeResult:
    ok: bool
    python_version: str | None
    message: str  # first line of py-spy's error, "" when ok


def first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("Error:"):
            return line[len("Error:"):].strip()
    lines = [text.strip() for text in stderr.splitlines() if text.strip()]
    return lines[0] if lines else ""


def probe(pid: int, native: bool = False, timeout: float = 15.0) -> ProbeResult:
    """One `py-spy dump`: proves py-spy can read the target and tells its Python version.

    A plain probe does not pause the target (--nonblocking): it reads the same memory under the
    same ptrace permission, and pausing a process of 64 runnable threads on 2 cores waits for
    each to be scheduled to stop (0.4-3 s, the service stopped meanwhile; 0.1-0.2 s without).
    A native probe must pause it: unwinding native frames needs the threads still."""
    cmd = [pyspy_binary(), "dump", "--pid", str(pid)]
    cmd.append("--native" if native else "--nonblocking")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ProbeResult(False, None, "py-spy dump timed out")
    if out.returncode == 0:
        match = _PY_VERSION.search(out.stdout)
        return ProbeResult(True, match.group(1) if match else None, "")
    return ProbeResult(False, None, first_error_line(out.stderr) or f"py-spy exited {out.returncode}")


def classify_probe_failure(message: str, pid: int) -> Exception | None:
    """Turns a final probe failure into the domain error it means; None means 'maybe not ready'."""
    if _PERMISSION.search(message):
        return PermissionDenied(
            f"not permitted to read process {pid}: run as root or allow ptrace "
            f"(kernel.yama.ptrace_scope=0, or CAP_SYS_PTRACE in containers). py-spy said: {message}")
    if _GONE.search(message) and not _NOT_READY.search(message):
        return NoSuchProcess(f"process {pid} is gone: {message}")
    return None


def is_not_ready(message: str) -> bool:
    return bool(_NOT_READY.search(message))


def record_command(pid: int, output: str, duration: float, rate: int, native: bool,
                   nonblocking: bool = False, subprocesses: bool = False,
                   fmt: str = "chrometrace") -> list[str]:
    """py-spy record with every thread (--threads), idle ones too (--idle).
    `fmt`: "chrometrace" (the default) stamps the samples with their instants: each thread's
    stack changes with the microsecond they were seen (readers/chrometrace.py); "speedscope" keeps
    only each thread's sample order (enough for the sparse native calibration recorder).
    `subprocesses`: the pid's descendants too (py-spy polls for them every 100 ms and tags each
    sample with its process), the rate applying to each process."""
    cmd = [pyspy_binary(), "record", "--pid", str(pid), "--output", output,
           "--format", fmt, "--rate", str(rate),
           "--duration", str(max(1, int(round(duration)))), "--threads", "--idle"]
    if native:
        cmd.append("--native")
    if nonblocking:
        cmd.append("--nonblocking")
    if subprocesses:
        cmd.append("--subprocesses")
    return cmd


_COUNTS = re.compile(r"Samples:\s*(\d+)\s+Errors:\s*(\d+)")


def parse_record_summary(stderr_text: str) -> tuple[int | None, int | None]:
    match = _COUNTS.search(stderr_text)
    if not match:
        return None, None
    return int(match.group(1)), int(match.group(2))


def tag_speedscope_process(path: str, pid: int) -> None:
    """Names the process in a speedscope file recorded for one pid: py-spy names a thread
    `Thread T "name"`, and `Process P Thread T "name"` only with --subprocesses. One recorder
    per process (the tree plan) keeps each thread's process that way, as the loader reads it."""
    import json

    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    for profile in data.get("profiles", []):
        name = profile.get("name", "")
        if isinstance(name, str) and name.startswith("Thread "):
            profile["name"] = f"Process {pid} {name}"
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
