"""Starts fixture workloads as real processes, waiting for their READY line."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import WORKLOADS


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
    """Starts a process that prints `READY <pid>`; yields the pid; always stops it."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + ready_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{command} did not print READY within {ready_timeout} s")
            readable, _, _ = select.select([proc.stdout], [], [], remaining)
            if not readable:
                continue
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(f"{command} exited before READY: {proc.stderr.read()[-2000:]}")
            if line.startswith("READY"):
                yield int(line.split()[1])
                return
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def workload_command(name: str, *args: str, python: str | None = None) -> list[str]:
    return [python or sys.executable, str(WORKLOADS / f"{name}.py"), *args]
