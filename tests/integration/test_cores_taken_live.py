"""A healthy service starved of cores by another process is told so, and who: the compute_bound
fixture (2 request threads, one per core, OpenBLAS at one thread: the service its own finding
calls healthy but for the model) beside a neighbour whose 2 threads hash on both cores at nice
-20, started before the attach and killed after it. At nice -20 against the service's 0 the
kernel gives the neighbour about 87 times the service's share of each core, so the service's
threads wait tens of seconds for a core per CPU-second they run: many times beyond the noise of
a shared machine (a fair share beside one busy loop waits about 0.5 s).

The neighbour takes both cores: `serial`, never beside another test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace, pytest.mark.serial]

# Two threads hashing 16 MB at a time: hashlib releases the GIL over the buffer, so both keep a
# core busy (at 1 MB a call they ran a core between them here: the GIL's hand-over each call);
# the process stops itself after a minute should the test not kill it.
SPINNER = """
import hashlib, os, sys, threading, time
os.nice(-20)
block = b"x" * (16 << 20)
stop = time.monotonic() + 60
def spin():
    while time.monotonic() < stop:
        hashlib.sha256(block).digest()
for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
print("SPINNING", flush=True)
time.sleep(max(0.0, stop - time.monotonic()))
"""


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _both_cores(pid: int, timeout: float = 10.0) -> bool:
    """True once the neighbour has run well over a core's worth over a half second: both threads."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        start, at = _cpu_s(pid), time.monotonic()
        time.sleep(0.5)
        if (_cpu_s(pid) - start) / (time.monotonic() - at) > 1.4:
            return True
    return False


@pytest.fixture
def niced_neighbour() -> Iterator[int]:
    """The neighbour's pid, once it spins on both cores at nice -20; killed and reaped after."""
    if os.geteuid() != 0:
        pytest.skip("a nice of -20 needs root")
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "SPINNING"
        assert _both_cores(proc.pid), "the neighbour does not spin on both cores"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_healthy_service_beside_a_niced_spinner_reads_cores_taken_naming_it(niced_neighbour, out_dir):
    command = workload_command("compute_bound", "--seconds", "60")
    started = time.monotonic()
    with running(command, ready_timeout=120) as pid:
        proc, report = run_report("attach", pid, "--duration", "4", "--json", "--output-dir", out_dir,
                                  timeout=120)
    assert proc.returncode == 0 and report is not None, proc.stderr[-3000:]
    taken = finding(report, "cores_taken")
    brief = (report.verdict, taken.summary, dict(taken.evidence))
    assert report.verdict.primary == "cores_taken", brief
    assert f"pid {niced_neighbour} (" in taken.summary and "nice -20" in taken.summary, brief
    assert evidence(taken, "runqueue_wait_per_cpu_second") > 5.0, brief  # ten times a fair share's
    holders = taken.value("holders")
    assert holders is not None and any(k.startswith(f"pid {niced_neighbour} ") for k in holders.value), brief
    assert f"renice +19 -p {niced_neighbour}" in taken.advice[1], brief
    assert time.monotonic() - started < 90
