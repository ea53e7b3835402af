"""Real servers (gunicorn, uvicorn) under a real load generator, attached at the pid a user sees
first: the verdict is the service's, read from its worker processes and event loops."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from diagnose.report.model import Report
from tests.conftest import REPO, WORKLOADS, marker_line, run_cli
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.servers import (free_port, gunicorn_gthread, gunicorn_sync, gunicorn_uvicorn_worker,
                                       load_during, start_server, uvicorn_app)
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]

SERVERS = REPO / "fixtures" / "servers"
SAMPLE_SECONDS = "4"  # as the version matrix of these servers (test_servers_python_versions.py)
LOAD_SECONDS = 12  # covers the probes, the window and py-spy's wrap-up


def attach_under_load(server, out_dir, path="/predict", connections=8, *extra) -> Report:
    with load_during(server.url(path), seconds=LOAD_SECONDS, connections=connections):
        proc, report = run_report("attach", server.pid, "--duration", SAMPLE_SECONDS, "--json",
                               "--output-dir", out_dir, *extra)
    assert proc.returncode == 0, proc.stderr
    return report


def severity_at_most_info(report: Report, check_id: str) -> bool:
    """The check ran and found at most "info", or had nothing to judge; a check missing from
    the report altogether fails."""
    found = [f.severity for f in report.findings if f.id == check_id]
    skipped = [n for n in report.not_applicable if n.id == check_id]
    assert len(found) + len(skipped) == 1, (check_id, found, skipped)
    return skipped != [] or found[0] in ("ok", "info")


def test_gunicorn_master_pid_gives_the_workers_preprocessing_verdict(out_dir):
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=3), port) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary == "preprocess_bound", report.verdict
    top = finding(report, "preprocess_bound").sites[0]
    assert top.file.endswith("wsgi_preprocess.py")
    assert top.function in ("normalize", "tokenize", "extract_features", "preprocess")
    roles = sorted(p.role for p in report.processes)
    assert roles == ["master", "worker", "worker", "worker"]
    master = next(p for p in report.processes if p.role == "master")
    assert master.pid == server.pid
    # The arbiter's waits for signals are never contention.
    assert severity_at_most_info(report, "lock_contention")
    assert all(w.pid != server.pid for w in report.waits)


def test_a_whole_array_sent_to_a_process_pool_per_request_is_the_pools_transfer(out_dir):
    """gunicorn gthread, each request's 8 MB frame submitted to a ProcessPoolExecutor(2) for a task
    of microseconds: the pool's feeder thread and the workers' reads are its CPU, the verdict is
    the transfer at the submitting line (not the kernel's work it causes)."""
    port = free_port()
    with start_server(gunicorn_gthread("pool_transfer", port, workers=1), port) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary == "pool_transfer", report.verdict.headline
    top = finding(report, "pool_transfer")
    assert top.sites[0].file.endswith("pool_transfer.py"), top.sites
    assert top.sites[0].line == marker_line(SERVERS / "pool_transfer.py", "whole-frame-to-pool"), top.sites
    assert top.advice[0].startswith("Send the pool less with each task"), top.advice


def test_idle_gunicorn_master_is_never_lock_contention(out_dir):
    port = free_port()
    with start_server(gunicorn_sync("wsgi_preprocess", port, workers=2), port) as server:
        proc, report = run_report("attach", server.pid, "--duration", "3", "--json",
                               "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    assert report.verdict.primary not in ("lock_contention", "preprocess_bound",
                                                "event_loop_blocked")
    assert severity_at_most_info(report, "lock_contention")


@pytest.mark.parametrize("loop", [None, "asyncio"], ids=["uvloop", "stdlib-asyncio"])
def test_async_endpoint_computing_inline_blocks_uvicorns_event_loop(out_dir, loop):
    port = free_port()
    with start_server(uvicorn_app("asgi_inline", port, loop=loop), port) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary == "event_loop_blocked", report.verdict
    assert report.event_loops[0].flavor == ("asyncio" if loop else "uvloop")
    blocked = finding(report, "event_loop_blocked")
    assert blocked.sites[0].function == "predict"
    assert blocked.sites[0].file.endswith("asgi_inline.py")
    assert evidence(blocked, "work_kind") == "CPU work"
    assert evidence(blocked, "loop_busy_share") > 0.8
    assert "run_in_threadpool" in blocked.advice[0]
    loop = report.event_loops[0]
    assert loop.callbacks[0].function == "predict"
    assert loop.callbacks[0].call_site.function == "Model.forward"


def test_async_endpoint_with_a_blocking_call_is_named_as_a_blocking_call(out_dir):
    port = free_port()
    with start_server(uvicorn_app("asgi_blocking", port, workers=2), port) as server:
        report = attach_under_load(server, out_dir, connections=16)
    assert report.verdict.primary == "event_loop_blocked", report.verdict
    blocked = finding(report, "event_loop_blocked")
    assert blocked.sites[0].function == "predict"
    assert evidence(blocked, "work_kind") == "blocking call"
    sites = [(s.function, s.line) for s in blocked.sites]
    assert ("fetch_features_sync", marker_line(SERVERS / "asgi_blocking.py", "blocking-call")) in sites
    assert "asyncio.sleep" in blocked.advice[0]
    workers = [p for p in report.processes if p.role == "worker"]
    assert len(workers) == 2


def test_gunicorn_uvicorn_workers_with_inline_compute_are_event_loop_blocked(out_dir):
    port = free_port()
    with start_server(gunicorn_uvicorn_worker("asgi_inline", port, workers=2), port) as server:
        report = attach_under_load(server, out_dir)
    # Keep-alive connections may all land on one worker: then the uneven load is real, and
    # it may lead; the blocked loop must still be found, critical, in the busy worker.
    assert report.verdict.primary in ("event_loop_blocked", "worker_imbalance"), report.verdict
    blocked = finding(report, "event_loop_blocked")
    assert blocked.severity == "critical" and blocked.sites[0].function == "predict"
    assert [p.role for p in report.processes].count("master") == 1
    # A blocked loop is never only compute-bound.
    assert report.verdict.primary != "compute_bound"


def test_well_behaved_async_service_is_not_event_loop_blocked(out_dir):
    port = free_port()
    with start_server(uvicorn_app("asgi_threadpool", port), port) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary != "event_loop_blocked", report.verdict
    assert severity_at_most_info(report, "event_loop_blocked")
    assert report.event_loops, "the loop thread is recognised"


def test_idle_async_server_is_neither_blocked_nor_preprocess_bound(out_dir):
    port = free_port()
    with start_server(uvicorn_app("asgi_inline", port), port) as server:
        proc, report = run_report("attach", server.pid, "--duration", "3", "--json",
                               "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    assert report.verdict.primary not in ("event_loop_blocked", "preprocess_bound")
    loop = report.event_loops[0]
    assert loop.idle_share > 0.8


def test_multiprocessing_parent_pid_gives_the_worker_processes_verdict(out_dir):
    path = WORKLOADS / "process_pool.py"
    with running(workload_command("process_pool", "--seconds", "120")) as pid:
        proc, report = run_report("attach", pid, "--duration", SAMPLE_SECONDS, "--json",
                               "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    assert report.verdict.primary == "preprocess_bound", report.verdict
    top = finding(report, "preprocess_bound").sites[0]
    assert top.file.endswith("process_pool.py")
    assert sum(p.role == "worker" for p in report.processes) >= 3
    assert next(p for p in report.processes if p.pid == pid).role == "master"
    # the workers' hashing loop is among the named sites (its line alone is ~half the samples)
    lines = [s.line for s in finding(report, "preprocess_bound").sites if s.file.endswith("process_pool.py")]
    assert marker_line(path, "worker-preprocess") in lines, lines


def test_no_children_samples_only_the_named_process(out_dir):
    with running(workload_command("process_pool", "--seconds", "120")) as pid:
        proc, report = run_report("attach", pid, "--no-children", "--duration", "3", "--json",
                               "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    assert [p.pid for p in report.processes] == [pid]
    assert "not sampled" in proc.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash as the launcher")
def test_a_shell_launcher_pid_is_followed_to_its_python_child(out_dir):
    # `; exit` keeps bash alive as the parent instead of exec'ing into Python.
    script = f"{sys.executable} {WORKLOADS / 'lock_contention.py'} --seconds 120; exit 0"
    launcher = subprocess.Popen(["bash", "-c", script], stdout=subprocess.DEVNULL)
    try:
        with load_ready(launcher.pid):
            proc, report = run_report("attach", launcher.pid, "--duration", SAMPLE_SECONDS, "--json",
                                   "--output-dir", out_dir)
            assert proc.returncode == 0, proc.stderr
            assert report.verdict.primary == "lock_contention", report.verdict
            refused, _ = run_cli("attach", launcher.pid, "--no-children", "--duration", "2",
                                 "--output-dir", out_dir, check_json=False)
            assert refused.returncode == 4
            child = next(c for c in _children(launcher.pid))
            assert str(child) in refused.stderr and "--no-children" in refused.stderr
    finally:
        for pid in _children(launcher.pid):
            subprocess.run(["kill", str(pid)], check=False)
        launcher.terminate()
        launcher.wait(timeout=15)


def _children(pid: int) -> list[int]:
    import psutil
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


class load_ready:
    """Waits until the launcher's Python child has warmed up (its threads exist)."""

    def __init__(self, pid: int, timeout: float = 30.0):
        self.pid, self.timeout = pid, timeout

    def __enter__(self):
        import time
        import psutil
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            kids = _children(self.pid)
            if kids and psutil.Process(kids[0]).num_threads() >= 6:
                time.sleep(1.0)
                return self
            time.sleep(0.2)
        raise AssertionError("the launcher's Python child did not start its threads")

    def __exit__(self, *exc):
        return False


def test_a_thread_per_request_server_is_measured_by_its_process_counters_not_its_acceptor(out_dir):
    # fixtures/servers/thread_per_request.py: ThreadingHTTPServer over HTTP/1.0, a new thread per
    # request living a few milliseconds, each copying the frame into a fresh 48 MB buffer. The
    # request threads come and go between the /proc sampler's reads: their CPU, system time and
    # page faults are in the process's counters only. Read from the threads it saw, the service
    # "ran" its acceptor's few percent of a core, other processes "held" the cores, and the
    # kernel's work sat on the acceptor's Thread.start with the advice to buffer writes.
    port = free_port()
    argv = [sys.executable, str(SERVERS / "thread_per_request.py"), "--port", str(port)]
    with start_server(argv, port, workers=None, loaded_marker=None) as server:
        report = attach_under_load(server, out_dir)
    assert report.verdict.primary == "kernel_work", report.verdict
    found = finding(report, "kernel_work")
    line = marker_line(SERVERS / "thread_per_request.py", "fresh-frame")
    assert found.sites and (found.sites[0].function, found.sites[0].line) == ("frame_buffer", line), found.sites
    assert report.verdict.first_advice[0].startswith("Stop mapping and unmapping memory on every call"), \
        report.verdict.first_advice
    assert "cores_taken" not in [f.id for f in report.findings if f.severity not in ("ok", "info")]
    account = report.cpu_account
    assert account is not None
    unexplained = next(p for p in account.parts if p.part.value == "unexplained")
    assert unexplained.share is not None and unexplained.share < 0.2, account
