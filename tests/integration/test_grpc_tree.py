"""A real grpcio server (ThreadPoolExecutor handlers, C-core threads) whose handlers run the
model under one global lock, with a Python child (a metrics exporter long-polling it over gRPC),
under a real gRPC client load, attached at the server's pid: the verdict is the server's lock,
the server is a worker though its threads are rarely busy, and the child, asleep in the C-core,
is no CPU-bound anything."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import psutil
import pytest

from tests.conftest import REPO, marker_line
from tests.integration.conftest import requires_ptrace
from tests.integration.servers import free_port
from tests.integration.typed import run_report

grpc = pytest.importorskip("grpc")

pytestmark = [pytest.mark.integration, requires_ptrace]

SERVERS = REPO / "fixtures" / "servers"
SERVER = SERVERS / "grpc_locked.py"
SAMPLE_SECONDS = "4"
LOAD_SECONDS = 16  # covers the probes, the window and py-spy's wrap-up
CPU_VERDICTS = ("cpu_bound", "compute_bound", "gil_contention")


def _kill_tree(proc: subprocess.Popen) -> None:
    try:
        members = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        members = [proc.pid]
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
    for pid in members:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    proc.wait(5)


@contextmanager
def grpc_server(port: int, *args: str, children: int = 1):
    """The fixture server in its own session, ready when a channel connects and its `children`
    (the exporter, and the housekeeper of `--helper-child`) exist; its whole tree is killed on
    exit."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DIAGNOSE_FIXTURE_")}
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        deadline = time.monotonic() + 30
        while len(psutil.Process(proc.pid).children()) < children and time.monotonic() < deadline:
            time.sleep(0.2)
        yield proc
    finally:
        _kill_tree(proc)


@contextmanager
def grpc_load(port: int, seconds: int = LOAD_SECONDS, concurrency: int = 16):
    """The gRPC client load in a process of its own, bounded in time and stopped (SIGTERM) when
    the block exits; the yielded dict holds its figures then."""
    client = subprocess.Popen([sys.executable, str(SERVERS / "grpc_load.py"), "--target",
                               f"127.0.0.1:{port}", "--seconds", str(seconds), "--concurrency",
                               str(concurrency)], stdout=subprocess.PIPE, text=True)
    box: dict = {}
    try:
        yield box
        client.send_signal(signal.SIGTERM)
        out, _ = client.communicate(timeout=60)
        box.update(json.loads(out.strip().splitlines()[-1]))
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(5)


def test_grpc_server_queueing_on_its_model_lock_is_the_verdict_not_its_idle_child(out_dir):
    port = free_port()
    with grpc_server(port) as server, grpc_load(port) as load:
        proc, report = run_report("attach", server.pid, "--duration", SAMPLE_SECONDS, "--json",
                               "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    assert load["requests"] > 0 and load["errors"] == 0, load
    processes = {p.pid: p for p in report.processes}
    assert processes[server.pid].role == "worker", processes
    children = [p for pid, p in processes.items() if pid != server.pid]
    assert children, "the exporter child was not sampled"
    for child in children:
        top = child.top_finding
        assert child.role == "helper" or (
            child.role == "worker" and (top is None or top.id not in CPU_VERDICTS
                                          or top.severity in ("ok", "info"))), child
    # The verdict: the server's lock, at the lock's line.
    assert report.verdict.primary == "lock_contention", report.verdict
    lock = next(f for f in report.findings if f.id == "lock_contention")
    site = lock.sites[0]
    assert site.file.endswith("grpc_locked.py")
    assert site.line == marker_line(SERVER, "model-lock")
    # No CPU verdict for a process that barely ran.
    for p in report.processes:
        top = p.top_finding
        if p.cpu_cores is not None and p.cpu_cores < 0.1 and top is not None:
            assert top.id not in CPU_VERDICTS or top.severity in ("ok", "info"), p


def test_a_housekeeping_child_of_the_grpc_server_is_no_worker_and_the_model_lock_stays_the_verdict(
        out_dir):
    # The forked housekeeper runs the server's command line and a little Python every 50 ms:
    # the server's child serving no request, no peer of it, so there is no fleet to call uneven.
    port = free_port()
    with grpc_server(port, "--helper-child", children=2) as server, grpc_load(port) as load:
        proc, report = run_report("attach", server.pid, "--duration", SAMPLE_SECONDS, "--json",
                                  "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    assert load["requests"] > 0 and load["errors"] == 0, load
    processes = {p.pid: p for p in report.processes}
    server_row = processes[server.pid]
    assert server_row.role == "worker", processes
    assert any(p.ppid == server.pid and p.cmdline == server_row.cmdline
               for p in report.processes), "the housekeeping child was not sampled"
    assert report.finding("worker_imbalance") is None, report.findings
    assert report.verdict.primary == "lock_contention", report.verdict
    site = next(f for f in report.findings if f.id == "lock_contention").sites[0]
    assert site.file.endswith("grpc_locked.py")
    assert site.line == marker_line(SERVER, "model-lock")
