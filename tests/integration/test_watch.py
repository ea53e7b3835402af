"""`diagnose watch` against a live fixture workload and the local Pyroscope contract server:
windows written and pushed, the end when the target exits, a server that is down, a signal."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from diagnose.report.model import Report
from tests.conftest import REPO, run_cli
from tests.integration.conftest import CliRun, requires_ptrace, running, workload_command
from tests.integration.typed import read_report
from tests.pyroscope_contract import IngestServer

pytestmark = [pytest.mark.integration, requires_ptrace]


def reports_in(out) -> list[Report]:
    return [read_report(p) for p in sorted(out.glob("diagnose-*.json"))
            if not p.name.endswith(".speedscope.json")]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.serial  # windows spaced --every apart, within a second or two: no neighbour
def test_two_windows_are_written_and_each_pushed_as_a_valid_profile(out_dir):
    with IngestServer() as server, \
            running(workload_command("lock_contention", "--seconds", "60")) as pid:
        proc, _ = run_cli("watch", pid, "--every", "4", "--duration", "2", "--windows", "2",
                          "--push", server.url, "--app-name", "ranker", "--tag", "env=ci",
                          "-o", out_dir, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Watch ended: 2 windows done" in proc.stderr
    requests = server.requests
    assert [r.status for r in requests] == [200, 200]
    assert all(r.problems == [] for r in requests)
    reports = reports_in(out_dir)
    assert len(reports) == 2
    for request, report in zip(requests, reports):
        assert request.app_name == "ranker"
        assert request.labels["env"] == "ci" and "pid" not in request.labels  # no series per pid
        assert request.labels["verdict"] == report.verdict.primary
        assert request.sample_total(unit="count") == sum(
            row.count for row in report.stacks.samples)
    # Each window's span is its own: the second starts --every after the first, not before
    # (how late a loaded machine lets it start is its figure, not the schedule's).
    assert requests[0].start < requests[0].end <= requests[1].start + 1
    assert 3 <= requests[1].start - requests[0].start <= 8


def test_a_watch_whose_target_exits_stops_with_exit_0(out_dir):
    with running(workload_command("lock_contention", "--seconds", "120")) as pid:
        watch = CliRun("watch", pid, "--every", "3", "--duration", "2", "-o", out_dir)
        # Ended once a window was written, however long the start-up took on this machine.
        assert watch.wait_for("; report "), watch.finish(timeout=5)[0].stderr
        os.kill(pid, signal.SIGKILL)
        proc, _ = watch.finish(timeout=90)
    assert proc.returncode == 0, proc.stderr
    assert f"the target {pid} exited" in proc.stderr
    assert 1 <= len(reports_in(out_dir)) <= 3


def test_a_push_server_that_is_down_is_exit_13_with_the_outputs_written(out_dir):
    url = f"http://127.0.0.1:{closed_port()}"
    with running(workload_command("lock_contention", "--seconds", "60")) as pid:
        proc, _ = run_cli("watch", pid, "--every", "2", "--duration", "2", "--windows", "1",
                          "--push", url, "--push-retries", "1", "-o", out_dir, timeout=90)
    assert proc.returncode == 13, proc.stderr
    [report] = reports_in(out_dir)
    html = next(out_dir.glob("*.html"))
    assert f"push failed: could not push the profile to {url}/ingest" in proc.stderr
    assert f"kept: {html}" in proc.stderr and "Traceback" not in proc.stderr
    assert report.stacks.samples


def test_sigterm_between_windows_ends_the_watch_with_the_window_written_and_pushed(out_dir):
    with IngestServer() as server, \
            running(workload_command("lock_contention", "--seconds", "60")) as pid:
        watch = subprocess.Popen(
            [sys.executable, "-m", "diagnose", "watch", str(pid), "--every", "30", "--duration",
             "2", "--push", server.url, "-o", str(out_dir)],
            cwd=REPO, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            line = ""
            while "window 1" not in line and time.monotonic() < deadline:
                ready, _, _ = select.select([watch.stderr], [], [], 1)
                line = watch.stderr.readline() if ready else ""
            assert "window 1" in line, "the first window never finished"
            watch.send_signal(signal.SIGTERM)
            code = watch.wait(timeout=30)
            rest = watch.stderr.read()
        finally:
            if watch.poll() is None:
                watch.kill()
                watch.wait()
        assert psutil.Process(pid).status() != psutil.STATUS_STOPPED
    assert code == 143, rest
    assert "stopped by SIGTERM between windows; 1 window written" in rest
    assert len(reports_in(out_dir)) == 1 and len(server.accepted) == 1
