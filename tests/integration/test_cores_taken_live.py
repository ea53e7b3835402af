"""A healthy service starved of cores by another process is told so, and who: the compute_bound
fixture (2 request threads, one per core, OpenBLAS at one thread: the service its own finding
calls healthy but for the model) beside a neighbour whose 2 threads hash on both cores at nice
-20, started before the attach and killed after it. At nice -20 against the service's 0 the
kernel gives the neighbour about 87 times the service's share of each core (both are this test's
children: one scheduling group, where nice orders them), so the service's threads wait tens of
seconds for a core per CPU-second they run: many times beyond the noise of a shared machine (a
fair share beside one busy loop of the same nice waits about 1 s).

The neighbour takes both cores: `serial`, never beside another test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace, pytest.mark.serial]

# Two threads hashing 16 MB at a time, each pinned to a core of its own: hashlib releases the GIL
# over the buffer, so both keep a core busy (at 1 MB a call they ran a core between them here: the
# GIL's hand-over each call), and unpinned the scheduler at times put both on one core, leaving
# the other to the service. The process stops itself after a minute should the test not kill it.
SPINNER = """
import hashlib, os, sys, threading, time
os.nice(-20)
block = b"x" * (16 << 20)
stop = time.monotonic() + 60
def spin(core):
    os.sched_setaffinity(0, {core})  # this thread only: the two never share a core
    while time.monotonic() < stop:
        hashlib.sha256(block).digest()
for core in sorted(os.sched_getaffinity(0))[:2]:
    threading.Thread(target=spin, args=(core,), daemon=True).start()
print("SPINNING", flush=True)
time.sleep(max(0.0, stop - time.monotonic()))
"""


def _cpu_s(path: str) -> float:
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _threads_spin(pid: int, timeout: float = 10.0) -> bool:
    """True once each of the neighbour's two spinning threads ran a fifth of a half second. Not
    two full cores: nice orders the processes of one scheduling group (this test's), and the
    machine's other sessions are groups of their own that share the cores fairly with it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tids = [t for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
        start = {t: _cpu_s(f"/proc/{pid}/task/{t}/stat") for t in tids}
        time.sleep(0.5)
        ran = [_cpu_s(f"/proc/{pid}/task/{t}/stat") - start[t] for t in tids]
        if len(ran) == 2 and min(ran) >= 0.1:
            return True
    return False


@contextmanager
def niced_neighbour() -> Iterator[int]:
    """The neighbour's pid, once it spins on both cores at nice -20; killed and reaped after."""
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "SPINNING"
        assert _threads_spin(proc.pid), "the neighbour's threads do not spin"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_a_healthy_service_beside_a_niced_spinner_reads_cores_taken_naming_it(out_dir):
    if os.geteuid() != 0:
        pytest.skip("a nice of -20 needs root")
    command = workload_command("compute_bound", "--seconds", "60")
    started = time.monotonic()
    # The service starts first: started beside the neighbour it took 14 s to import its model.
    with running(command, ready_timeout=120) as pid, niced_neighbour() as neighbour:
        proc, report = run_report("attach", pid, "--duration", "4", "--json", "--output-dir", out_dir,
                                  timeout=120)
    assert proc.returncode == 0 and report is not None, proc.stderr[-3000:]
    taken = finding(report, "cores_taken")
    brief = (report.verdict, taken.summary, dict(taken.evidence))
    assert report.verdict.primary == "cores_taken", brief
    assert f"pid {neighbour} (" in taken.summary and "nice -20" in taken.summary, brief
    assert evidence(taken, "runqueue_wait_per_cpu_second") > 5.0, brief  # five times a fair share's
    holders = taken.value("holders")
    assert holders is not None and any(k.startswith(f"pid {neighbour} ") for k in holders.value), brief
    assert f"renice +19 -p {neighbour}" in taken.advice[1], brief
    assert time.monotonic() - started < 90
