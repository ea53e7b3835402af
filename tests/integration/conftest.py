"""Starts fixture workloads as real processes, waiting for their READY line."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from diagnose.report.model import Report
from tests.conftest import REPO, WORKLOADS
from tests.ready import wait_ready


def _ptrace_allowed() -> bool:
    if os.geteuid() == 0:
        return True
    try:
        return Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip() == "0"
    except OSError:
        return True


requires_ptrace = pytest.mark.skipif(not _ptrace_allowed(),
                                     reason="attaching py-spy needs root or ptrace_scope=0")


@contextmanager
def running(command: list[str], ready_timeout: float = 60.0):
    """Starts a fixture program; yields the pid of its READY line (tests/ready.py); always stops
    it."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield wait_ready(proc, ready_timeout).pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def workload_command(name: str, *args: str, python: str | None = None) -> list[str]:
    return [python or sys.executable, str(WORKLOADS / f"{name}.py"), *args]


SECRET_ARGS = ["--api-key=sk-live-SECRET123", "--password", "hunter2",
               "--db", "postgres://admin:s3cret@localhost/db"]
SECRETS = ["SECRET123", "hunter2", "s3cret"]


@dataclass(frozen=True)
class Capture:
    """One real attach: the --json report, typed, and the directory its files were written to."""

    report: Report
    out_dir: Path


def attach_workload(captures, name: str, *workload_args: str, seconds: str = "6") -> Capture:
    """`diagnose attach --duration SECONDS --json` on fixtures/workloads/NAME.py started with
    `workload_args`, made once per session for those arguments (tests.conftest.SessionCaptures)
    and shared by every test that asks for the same one."""
    from tests.integration.typed import run_report

    def make(out: Path) -> Capture:
        with running(workload_command(name, "--seconds", "180", *workload_args)) as pid:
            proc, report = run_report("attach", pid, "--duration", seconds, "--json",
                                   "--output-dir", out)
        assert proc.returncode == 0 and report is not None, proc.stderr
        return Capture(report, out)

    return captures.get(("attach", name, workload_args, seconds), make)


def attach_hostile_names(out: Path) -> tuple[Path, dict]:
    """Attaches the real CLI to the hostile-names workload run with secret-looking arguments;
    returns the HTML report's path and the --json report."""
    from tests.conftest import run_cli

    with running(workload_command("hostile_names", "--seconds", "40", *SECRET_ARGS)) as pid:
        proc, report = run_cli("attach", pid, "--duration", "3", "--json", "--output-dir", out)
    assert proc.returncode == 0, proc.stderr
    return next(out.glob("*.html")), report


def shared_hostile_names(captures) -> tuple[Path, dict]:
    """attach_hostile_names made once per session: the browser's and the integration tests'
    hostile-names assertions read the same capture."""
    return captures.get(("hostile_names", tuple(SECRET_ARGS), "3"), attach_hostile_names)


class CliRun:
    """`python -m diagnose ARGS` started in the background, its stderr read as it is written, so
    a test can act at a point of the run (the window under way, a first report written) instead
    of guessing how long the start-up takes on a loaded machine."""

    def __init__(self, *args: object) -> None:
        import threading

        self._proc = subprocess.Popen([sys.executable, "-m", "diagnose", *map(str, args)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=REPO)
        self._lines: list[str] = []
        self._stdout: list[str] = []
        self._changed = threading.Condition()
        self._readers = [threading.Thread(target=self._read_stderr, daemon=True),
                         threading.Thread(target=lambda: self._stdout.append(self._proc.stdout.read()),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()

    def _read_stderr(self) -> None:
        for line in self._proc.stderr:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._lines.append("")  # end of stream
            self._changed.notify_all()

    def wait_for(self, text: str, timeout: float = 90.0) -> bool:
        """True once a line of stderr contains `text`; False at its end or after `timeout`."""
        with self._changed:
            return self._changed.wait_for(
                lambda: any(text in line for line in self._lines) or "" in self._lines,
                timeout) and any(text in line for line in self._lines)

    def finish(self, timeout: float = 120.0) -> tuple[subprocess.CompletedProcess, dict | None]:
        """Waits for the exit (killing the run after `timeout`); the process and its --json
        output, parsed, if any."""
        import json

        try:
            self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for reader in self._readers:
            reader.join(timeout=10)
        stdout, stderr = "".join(self._stdout), "".join(self._lines)
        done = subprocess.CompletedProcess(self._proc.args, self._proc.returncode, stdout, stderr)
        return done, (json.loads(stdout) if stdout.strip().startswith("{") else None)
