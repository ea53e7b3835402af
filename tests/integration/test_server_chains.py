"""Waits that end in another process on this host, on real processes: the verdict follows the
socket a request thread sleeps on to the process listening at its other end, and names it.

* a front end whose 16 request threads each keep one connection to a feature backend started
  apart from it (fixtures/workloads/remote_backend.py, feature_backend.py), over TCP on
  127.0.0.1 and over a Unix socket: the backend's one scoring thread is on a core the whole
  window, so the backend is the limit (`backend_saturated`, "run more of it");
* the same front end on a backend that answers after an IO-bound sleep, all connections at once:
  the backend is not at capacity, and no finding says it is;
* the backend in its own network namespace, reached over a veth pair (a remote host, as far as
  the front end's namespace can tell): no local process serves the address, and the report names
  it as the end of the chain.

Each test attaches the real CLI (`diagnose attach --duration 4 --json`) to the front end only and
asserts what the tool decided (the verdict, the backend its finding names, the wait graph's
bottleneck and who serves it), never a throughput.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from diagnose.report.model import Report
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.servers import free_port
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]

SECONDS = "4"


def brief(report: Report) -> str:
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.summary, (f.advice or [""])[0])
                                    for f in report.findings][:5],
                       "wait_graph": report.wait_graph}, indent=1, default=str)[:12000]


@contextmanager
def backend_and_front_end(tmp_path: Path, unix: bool, *backend_args: str,
                          front_args: tuple[str, ...] = ()) -> Iterator[tuple[int, int]]:
    """A backend started apart (this test's child, not the front end's), then the front end
    connected to it: (backend pid, front end pid)."""
    where = ["--unix", str(tmp_path / "backend.sock")] if unix else ["--port", str(free_port())]
    with running(workload_command("feature_backend", "--seconds", "120", *where, *backend_args)) as backend:
        with running(workload_command("remote_backend", "--seconds", "120", *where, *front_args)) as front:
            yield backend, front


@pytest.mark.parametrize("unix", [False, True], ids=["tcp", "unix"])
def test_threads_waiting_on_a_local_backend_at_capacity_name_the_backend_and_run_more_of_it(
        tmp_path: Path, unix: bool) -> None:
    with backend_and_front_end(tmp_path, unix) as (backend, front):
        proc, report = run_report("attach", front, "--duration", SECONDS, "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "backend_saturated", brief(report)
    found = finding(report, "backend_saturated")
    assert f"pid {backend}" in str(evidence(found, "backend")), brief(report)
    assert "run more of it" in found.advice[0].lower(), brief(report)
    # the wait graph's bottleneck is the socket, served by the backend's process
    graph = report.wait_graph
    assert graph is not None and graph.bottleneck, brief(report)
    neck = next(n for n in graph.nodes if n.id == graph.bottleneck)
    assert neck.resource == "socket", brief(report)
    served = [e.target for e in graph.edges if e.source == neck.id and e.kind == "served_by"]
    assert f"p:{backend}" in served, brief(report)
    assert f"process {backend}" in graph.summary, brief(report)
    # the front end itself is not what to tune: no verdict of idleness
    assert report.finding("underloaded") is None or report.finding("underloaded").score < 25, brief(report)


def test_a_backend_that_answers_after_sleeping_is_not_called_the_limit(tmp_path: Path) -> None:
    with backend_and_front_end(tmp_path, False, "--sleep-ms", "20") as (_backend, front):
        proc, report = run_report("attach", front, "--duration", SECONDS, "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary != "backend_saturated", brief(report)
    found = report.finding("backend_saturated")
    assert found is None or found.score < 25, brief(report)


requires_netns = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="a network namespace joined by a veth pair needs root and ip(8) (iproute2)")


@contextmanager
def remote_host() -> Iterator[tuple[str, list[str]]]:
    """A network namespace joined to this one by a veth pair: (its address, the command prefix
    that runs a program inside it). Removed on exit."""
    name = "diag-" + uuid.uuid4().hex[:8]
    host_end, far_end = name + "h", name + "r"
    subnet = 10 + os.getpid() % 200  # 10.<subnet>.213.0/30: unlikely to meet this host's own
    near, far = f"10.{subnet}.213.1", f"10.{subnet}.213.2"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)

    ip("netns", "add", name)
    try:
        ip("link", "add", host_end, "type", "veth", "peer", "name", far_end, "netns", name)
        ip("addr", "add", f"{near}/30", "dev", host_end)
        ip("link", "set", host_end, "up")
        ip("-n", name, "addr", "add", f"{far}/30", "dev", far_end)
        ip("-n", name, "link", "set", far_end, "up")
        ip("-n", name, "link", "set", "lo", "up")
        yield far, ["ip", "netns", "exec", name]
    finally:
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, timeout=20)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


@requires_netns
def test_threads_waiting_on_a_backend_no_local_process_serves_name_its_address_as_the_chains_end(
        tmp_path: Path) -> None:
    port = str(free_port())
    with remote_host() as (address, inside):
        backend = inside + workload_command("feature_backend", "--seconds", "120", "--host", address,
                                            "--port", port)
        with running(backend):
            with running(workload_command("remote_backend", "--seconds", "120", "--host", address,
                                          "--port", port)) as front:
                proc, report = run_report("attach", front, "--duration", SECONDS, "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary != "backend_saturated", brief(report)
    assert f"{address}:{port}" in report.verdict.headline, brief(report)
    assert "which no process on this host serves" in report.verdict.headline, brief(report)


def test_following_the_peer_samples_the_backend_and_names_what_it_runs(tmp_path: Path) -> None:
    """`--follow-peers`: the backend the front end's connections lead to is found before the
    window and sampled with it (a peer, not a worker), so the chain goes on into the backend's
    own stacks: its busy thread's function is named beside "run more of it"."""
    with backend_and_front_end(tmp_path, False) as (backend, front):
        proc, report = run_report("attach", front, "--follow-peers", "--duration", SECONDS, "--json",
                                  "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    roles = {p.pid: p.role for p in report.processes}
    assert roles.get(backend) == "peer" and roles.get(front) != "peer", roles
    assert report.verdict.primary == "backend_saturated", brief(report)
    found = finding(report, "backend_saturated")
    assert evidence(found, "backend_sampled_pid") == backend, brief(report)
    assert "run more of it" in found.advice[0].lower(), brief(report)
    # the backend's own stacks: its scoring function, in its own file
    assert any(s.function == "score_features" and s.file.endswith("feature_backend.py")
               for s in found.sites), brief(report)
    assert "score_features" in found.advice[1], brief(report)
    assert "peer serving tcp 127.0.0.1:" in proc.stderr, proc.stderr


def test_a_lock_held_across_calls_to_a_backend_at_capacity_ends_its_chain_at_the_backend(tmp_path: Path) -> None:
    """The front end guards its calls with one lock (`--lock-around-call`): the threads queue on
    the lock, its holder waits in recv on the backend, whose one scoring thread is at capacity.
    Taking the call out of the lock would only move the queue to the backend: the verdict is
    the lock, with the chain followed to the backend and the backend's capacity as the lever."""
    with backend_and_front_end(tmp_path, False, front_args=("--lock-around-call",)) as (backend, front):
        proc, report = run_report("attach", front, "--duration", SECONDS, "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "lock_contention", brief(report)
    found = finding(report, "lock_contention")
    assert f"pid {backend}" in str(evidence(found, "serving_process")), brief(report)
    assert evidence(found, "fix") == {"knob": "backend_processes", "value": 2}, brief(report)
    assert "Run more of the backend" in found.advice[0], brief(report)
    assert "at its capacity" in found.summary, brief(report)
