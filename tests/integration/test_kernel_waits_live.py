"""Waits only the kernel can name, on real processes: each blocked thread's syscall
(/proc/PID/task/TID/syscall) says what it sleeps on, and the verdict follows it.

* a file lock (`flock` / `fcntl` record lock) shared by gunicorn's worker processes: the workers
  queue on it in the kernel, no Python lock anywhere (fixtures/servers/wsgi_file_lock.py);
* a service in its own pid and mount namespaces with its code on a private tmpfs (a container):
  py-spy reads its Python stacks but cannot unwind native frames there, so a lock wait is told
  from running code only by the kernel's futex (fixtures/workloads/namespaced_service.py, modes
  `contend` and `deadlock`);
* a pthread mutex inside a C library, reached through ctypes (fixtures/workloads/native_mutex.py);
* one sidecar process that answers every request over a pipe (fixtures/workloads/pipe_sidecar.py).

Each test attaches the real CLI (`diagnose attach --duration 4 --json`) and asserts what the tool
decided (the verdict, what its finding names, the wait graph's bottleneck and knots), never a
throughput. Every process a test starts is stopped when it ends.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from diagnose.report.model import Finding, Report
from diagnose.report.model.codec import encode
from diagnose.report.model.wait_graph import WaitGraph, WaitNode
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.servers import SERVERS, free_port, gunicorn_sync, load_during, start_server
from tests.integration.typed import deadlock_cycles, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]

SECONDS = "4"  # the sampling window of every attach here
LOAD_SECONDS = 14  # covers the CLI's start-up, the window and py-spy's wrap-up

requires_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="new pid and mount namespaces need root and unshare(1)")


# -- reading the report -----------------------------------------------------------------------

def brief(report: Report) -> str:
    """What a failure message needs: the verdict, the findings and the wait graph."""
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.severity, f.summary,
                                     (f.advice or [""])[0]) for f in report.findings][:5],
                       "wait_graph": report.wait_graph}, indent=1, default=str)[:12000]


def words(found: Finding) -> str:
    """A finding's text as the engineer reads it: summary, evidence and advice, lower case."""
    return json.dumps([found.summary, {v.key: v.value for v in found.evidence}, found.advice,
                       [encode(site) for site in found.sites]], default=str).lower()


def graph(report: Report) -> WaitGraph:
    wait_graph = report.wait_graph
    assert wait_graph, "no wait_graph in the report\n" + brief(report)
    return wait_graph


def node(wait_graph: WaitGraph, node_id: str) -> WaitNode:
    return next(n for n in wait_graph.nodes if n.id == node_id)


def bottleneck(report: Report) -> WaitNode:
    """The wait graph's bottleneck node (a resource)."""
    wait_graph = graph(report)
    assert wait_graph.bottleneck, "the wait graph names no bottleneck\n" + brief(report)
    return node(wait_graph, wait_graph.bottleneck)


def edges(wait_graph: WaitGraph, kind: str, source: str | None = None, target: str | None = None):
    return [e for e in wait_graph.edges if e.kind == kind
            and (source is None or e.source == source) and (target is None or e.target == target)]


def attach(pid: int, out_dir: Path) -> Report:
    proc, report = run_report("attach", pid, "--duration", SECONDS, "--json", "--output-dir", out_dir)
    assert proc.returncode == 0 and report is not None, proc.stderr[-3000:]
    return report


def children(pid: int) -> list[int]:
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


# -- a file lock across worker processes ------------------------------------------------------

@pytest.mark.parametrize("kind", ["flock", "lockf"])
def test_workers_queueing_on_a_file_lock_are_lock_contention_naming_the_file_lock_and_its_holder(
        out_dir, tmp_path, kind):
    port = free_port()
    env = {"DIAGNOSE_FIXTURE_LOCK": kind, "DIAGNOSE_FIXTURE_LOCK_PATH": str(tmp_path / "device.lock")}
    with start_server(gunicorn_sync("wsgi_file_lock", port, workers=3), port, env=env) as server:
        workers = server.worker_pids()
        with load_during(server.url("/predict"), seconds=LOAD_SECONDS, connections=8):
            report = attach(server.pid, out_dir)
    assert report.verdict.primary == "lock_contention", brief(report)
    contention = finding(report, "lock_contention")
    text = words(contention)
    # It names the file lock (as such, or by its file) and who holds it: a sibling worker.
    assert "file lock" in text or "device.lock" in text, brief(report)
    assert any(str(pid) in text for pid in workers) or "forward" in text, brief(report)
    top = contention.sites[0]
    assert top.file.endswith("wsgi_file_lock.py"), contention.sites
    marker = "file-lock" if kind == "flock" else "posix-lock"
    assert top.line == marker_line(SERVERS / "wsgi_file_lock.py", marker), contention.sites
    # The wait graph: the workers wait for the file lock, held by worker processes.
    wait_graph = graph(report)
    lock = bottleneck(report)
    assert lock.resource == "file_lock", brief(report)
    waiters = {node(wait_graph, e.source).pid for e in edges(wait_graph, "waits_for", target=lock.id)}
    assert len(waiters & set(workers)) >= 2, brief(report)
    holders = {node(wait_graph, e.target).pid for e in edges(wait_graph, "held_by", source=lock.id)}
    assert holders & set(workers), brief(report)


# -- a service in other namespaces ------------------------------------------------------------

NAMESPACED = WORKLOADS / "namespaced_service.py"


def namespaced(mode: str, *args: str):
    """namespaced_service.py run in new pid + mount namespaces by its own wrapper (`--namespace`),
    which prints the service's host pid: `running` yields it and stops the whole namespace."""
    return running(workload_command("namespaced_service", "--namespace", "--mode", mode,
                                    "--seconds", "120", *args))


def code_hidden_from_the_host(pid: int) -> str:
    """The service's script path as it runs, checked absent on the host, present through
    /proc/PID/root."""
    script = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1].decode()
    assert not Path(script).exists(), script
    assert Path(f"/proc/{pid}/root{script}").is_file(), script
    return script


@requires_namespaces
def test_a_contended_lock_in_a_container_is_lock_contention_without_native_frames(out_dir):
    with namespaced("contend") as pid:
        script = code_hidden_from_the_host(pid)
        report = attach(pid, out_dir)
    assert report.verdict.primary == "lock_contention", brief(report)
    top = finding(report, "lock_contention").sites[0]
    assert top.file == script or top.file.endswith("namespaced_service.py"), top
    assert top.line == marker_line(NAMESPACED, "ns-contended-acquire"), top
    assert bottleneck(report).resource == "lock", brief(report)


@requires_namespaces
def test_a_deadlock_in_a_container_is_a_deadlock_without_native_frames(out_dir):
    with namespaced("deadlock") as pid:
        code_hidden_from_the_host(pid)
        report = attach(pid, out_dir)
    assert report.verdict.primary == "deadlock", brief(report)
    assert report.verdict.severity == "critical", brief(report)
    (cycle,) = deadlock_cycles(finding(report, "deadlock"))
    seen = {(t.holds.line, t.waits_for.line) for t in cycle.threads}
    expected = {(marker_line(NAMESPACED, held), marker_line(NAMESPACED, waits))
                for held, waits in (("ns-inventory-first", "ns-pricing-second"),
                                    ("ns-pricing-first", "ns-inventory-second"))}
    assert seen == expected, cycle
    assert graph(report).knots, brief(report)


# -- a mutex in a C library -------------------------------------------------------------------

def test_threads_queueing_on_a_native_mutex_are_lock_contention(out_dir):
    with running(workload_command("native_mutex", "--seconds", "120")) as pid:
        report = attach(pid, out_dir)
    assert report.verdict.primary == "lock_contention", brief(report)
    top = finding(report, "lock_contention").sites[0]
    assert top.function == "DeviceClient.infer", top
    assert top.line == marker_line(WORKLOADS / "native_mutex.py", "native-lock"), top
    assert bottleneck(report).resource == "lock", brief(report)


# -- one sidecar behind a pipe ----------------------------------------------------------------

def test_threads_waiting_on_one_pipe_sidecar_are_told_the_sidecar_is_the_bottleneck(out_dir):
    with running(workload_command("pipe_sidecar", "--seconds", "120")) as pid:
        (sidecar,) = children(pid)
        report = attach(pid, out_dir)
    verdict = report.verdict
    first = finding(report, verdict.primary)
    # What it says beyond the code's own names (the file pipe_sidecar.py, Sidecar.call) names the
    # pipe or the process at its other end.
    said = (verdict.headline + " " + words(first)).lower()
    said = said.replace("pipe_sidecar.py", "").replace("sidecar.call", "")
    assert "pipe" in said or str(sidecar) in said, brief(report)
    # The wait graph: the bottleneck is the pipe (or the sidecar process), served by the sidecar.
    wait_graph = graph(report)
    neck = bottleneck(report)
    if neck.resource == "pipe":
        served = {node(wait_graph, e.target).pid
                  for e in edges(wait_graph, "served_by", source=neck.id)}
        assert sidecar in served, brief(report)
    else:
        assert neck.pid == sidecar, brief(report)
