"""Services that hang through other resources than two locks, attached by the real CLI and
py-spy: a thread holding a lock waits for a future whose job needs that lock (one process), and a
parent waits for a child that blocks writing to the pipe the parent never reads (two processes).
Each is reported as a deadlock with its chain (model/knots.py): every thread, what it waits on
and where, and who serves that; the same services with the hang removed are not."""

from __future__ import annotations

import json

import pytest

from diagnose.report.model import Finding, Report
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import attach_workload, requires_ptrace
from tests.integration.typed import deadlock_cycles, evidence, finding

pytestmark = [pytest.mark.integration, requires_ptrace]

SECONDS = "3"
THREADS = 8  # deadlock_future's default request threads


def brief(report: Report) -> str:
    """What decides a knot, per thread, for a failure's message: its states and /proc's CPU."""
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.summary) for f in report.findings],
                       "threads": [(t.pid, t.name, t.states, t.os.cpu_s if t.os else None)
                                   for t in report.threads]}, indent=1, default=str)


def knot_threads(found: Finding) -> list[dict]:
    """The knot's threads as the evidence has them (with each one's pid)."""
    (raw,) = evidence(found, "deadlocks")
    assert raw["kind"] == "knot", raw
    return list(raw["threads"])


def test_a_lock_holder_waiting_for_a_future_whose_job_needs_the_lock_is_a_deadlock(captures):
    capture = attach_workload(captures, "deadlock_future", seconds=SECONDS)
    report = capture.report
    assert report.verdict.primary == "deadlock", brief(report)
    assert report.verdict.severity == "critical", brief(report)
    found = finding(report, "deadlock")
    path = WORKLOADS / "deadlock_future.py"
    (cycle,) = deadlock_cycles(found)
    waiter, loader = cycle.threads
    # the request thread that missed first (any of them) holds the lock and waits for the future
    assert waiter.thread.startswith("request-") and loader.thread == "loader_0", cycle
    assert waiter.holds.line == marker_line(path, "miss-lock"), cycle
    assert waiter.waits_for.taken == "future", cycle
    assert waiter.waits_for.line == marker_line(path, "future-wait"), cycle
    assert loader.waits_for.taken == "lock", cycle
    assert loader.waits_for.line == marker_line(path, "load-lock"), cycle
    assert (waiter.held_by, loader.held_by) == (loader.thread, waiter.thread), cycle
    assert len(cycle.victims) == THREADS - 1, cycle
    assert (f"{waiter.thread} waits for a future (workloads/deadlock_future.py:"
            f"{marker_line(path, 'future-wait')}), run by loader_0, which waits for FeatureCache._lock "
            f"(workloads/deadlock_future.py:{marker_line(path, 'load-lock')}), held by {waiter.thread}"
            in found.summary), found.summary
    assert found.advice[0].startswith("Do not wait for a future while holding a lock"), found.advice
    # the victims queue on the lock forever: not lock contention
    assert finding(report, "lock_contention").severity != "critical", brief(report)
    (page,) = capture.out_dir.glob("*.html")
    assert '<pre id="noscript-deadlock">Found one deadlock:' in page.read_text(encoding="utf-8")


def test_the_same_cache_waiting_for_its_future_outside_the_lock_is_no_deadlock(captures):
    report = attach_workload(captures, "deadlock_future", "--wait-outside-lock", seconds=SECONDS).report
    assert report.verdict.primary != "deadlock", brief(report)
    assert finding(report, "deadlock").score == 0, brief(report)


def test_a_parent_waiting_for_a_child_blocked_on_the_pipe_it_never_reads_is_a_deadlock(captures):
    report = attach_workload(captures, "deadlock_subprocess", seconds=SECONDS).report
    assert report.verdict.primary == "deadlock", brief(report)
    found = finding(report, "deadlock")
    path = WORKLOADS / "deadlock_subprocess.py"
    parent, child = knot_threads(found)
    assert parent["pid"] == report.target.pid and child["pid"] != parent["pid"], found.evidence
    assert (parent["waits_for"]["taken"], parent["waits_for"]["line"]) == (
        "child", marker_line(path, "proc-wait")), parent
    assert (child["waits_for"]["taken"], child["waits_for"]["line"]) == (
        "pipe_write", marker_line(path, "child-write")), child
    assert (parent["held_by"], child["held_by"]) == (child["thread"], parent["thread"])
    assert evidence(found, "knot_processes") == f"{parent['pid']}, {child['pid']}"
    assert (f"MainThread (process {parent['pid']}) waits for child process {child['pid']} to exit "
            f"(workloads/deadlock_subprocess.py:{marker_line(path, 'proc-wait')}), served by MainThread "
            f"(process {child['pid']}), which waits for pipe") in found.summary, found.summary
    assert "`proc.communicate()` instead of `proc.wait()`" in found.advice[0], found.advice


def test_the_same_parent_reading_its_childs_output_while_waiting_is_no_deadlock(captures):
    report = attach_workload(captures, "deadlock_subprocess", "--communicate", seconds=SECONDS).report
    assert report.verdict.primary != "deadlock", brief(report)
    assert finding(report, "deadlock").score == 0, brief(report)
