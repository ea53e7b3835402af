"""Waits no thread's stack shows, found by reading the asyncio tasks from the target's memory
during a real attach: request tasks parked on an asyncio.Semaphore (async_wait at the
`async with`), and two tasks awaiting each other (a deadlock, with the request tasks awaiting
them as its victims)."""

from __future__ import annotations

import json
import sys

import pytest

from diagnose.report.model import Report
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import attach_workload, requires_ptrace
from tests.integration.typed import deadlock_cycles, evidence, finding

pytestmark = [pytest.mark.integration, requires_ptrace,
              pytest.mark.skipif(sys.version_info < (3, 11),
                                 reason="the task reader reads CPython 3.11-3.13 targets")]

SECONDS = "3"


def brief(report: Report) -> str:
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.summary) for f in report.findings]},
                      indent=1, default=str)


def check_async_wait(report: Report) -> None:
    """Request tasks parked on the fixture's Semaphore(2): async_wait at its `async with`."""
    assert report.verdict.primary == "async_wait", brief(report)
    wait = finding(report, "async_wait")
    path = WORKLOADS / "async_semaphore.py"
    assert wait.sites[0].line == marker_line(path, "slots-acquire"), wait.sites
    assert wait.fixes[0].knob == "slots", wait.evidence
    assert wait.fixes[0].value > 2, wait.evidence  # more permits than today's 2
    (tasks,) = report.tasks
    site = tasks.sites[0]
    assert (site.kind, site.name, site.capacity) == ("semaphore", "slots", 2), site
    assert site.waiting_avg > 20, site  # ~30 of the 32 request tasks wait at any moment


def check_await_cycle(report: Report) -> None:
    """Tasks refresh and loader await each other: a deadlock, the request tasks its victims."""
    assert report.verdict.primary == "deadlock", brief(report)
    assert report.verdict.severity == "critical", brief(report)
    dead = finding(report, "deadlock")
    assert evidence(dead, "deadlocked_tasks") == 2 and evidence(dead, "victim_tasks") == 8, dead
    path = WORKLOADS / "await_cycle.py"
    lines = {site.line for site in dead.sites}
    assert lines == {marker_line(path, "refresh-awaits-loader"),
                     marker_line(path, "loader-awaits-refresh")}, dead.sites
    (cycle,) = deadlock_cycles(dead)
    assert {t.thread for t in cycle.threads} == {"task refresh", "task loader"}, cycle


# Per workload, what its attach must show (also run on CPython 3.11-3.13:
# test_python_versions_hidden_waits).
ASYNC_CHECKS = {"async_semaphore": check_async_wait, "await_cycle": check_await_cycle}


def test_request_tasks_parked_on_a_semaphore_are_an_async_wait_at_the_async_with(captures):
    check_async_wait(attach_workload(captures, "async_semaphore", seconds=SECONDS).report)


def test_two_tasks_awaiting_each_other_are_a_deadlock_with_the_request_tasks_as_victims(captures):
    check_await_cycle(attach_workload(captures, "await_cycle", seconds=SECONDS).report)


def test_the_same_service_without_the_cycle_is_no_deadlock(captures):
    report = attach_workload(captures, "await_cycle", "--acyclic", seconds=SECONDS).report
    assert report.verdict.primary != "deadlock", brief(report)
    assert finding(report, "deadlock").score == 0
