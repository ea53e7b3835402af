"""Request threads polling for their result in a sleep loop, on a real process:
fixtures/workloads/poll_for_result.py (8 request threads handing jobs to one model thread and
sleeping 20 ms between looks at the results). The kernel sees timers and the threads are never
busy, so without reading the loop the service reads as waiting for work; the verdict names the
poll's sleep and advises waiting on the result itself. Its asyncio twin,
fixtures/workloads/async_poll_for_result.py, polls with `await asyncio.sleep(0.02)` in request
tasks, read from the process's memory. Asserts what the tool decided, never a measured speed-up
(benchmarks/advice_gain.py measures that)."""

from __future__ import annotations

import pytest

from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]


def test_request_threads_polling_for_their_result_are_told_to_wait_on_it(tmp_path):
    with running(workload_command("poll_for_result", "--seconds", "60")) as pid:
        proc, report = run_report("attach", pid, "--duration", "3", "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "poll_loop", report.verdict
    found = finding(report, "poll_loop")
    line = marker_line(WORKLOADS / "poll_for_result.py", "poll-sleep")
    assert (found.sites[0].function, found.sites[0].line) == ("wait_polling", line), found.sites
    assert evidence(found, "poll_threads") == 8
    assert report.verdict.first_advice[0].startswith("Stop polling at wait_polling")
    assert finding(report, "underloaded").score < 25


def test_request_tasks_polling_for_their_result_are_told_to_await_it(tmp_path):
    # fixtures/workloads/async_poll_for_result.py: 8 request tasks awaiting asyncio.sleep(0.02)
    # between looks at the results, and a housekeeping task pacing itself (no poll)
    with running(workload_command("async_poll_for_result", "--seconds", "60")) as pid:
        proc, report = run_report("attach", pid, "--duration", "3", "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "poll_loop", report.verdict
    found = finding(report, "poll_loop")
    line = marker_line(WORKLOADS / "async_poll_for_result.py", "poll-sleep")
    assert [(s.function, s.line) for s in found.sites] == [("wait_polling", line)], found.sites
    assert evidence(found, "pollers") == "request tasks"
    assert report.verdict.first_advice[0].startswith("Stop polling at wait_polling")
    assert finding(report, "underloaded").score < 25
