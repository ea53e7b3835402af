"""Wait analysis on real processes: GIL, pools, logging locks, backlogs, fan-out — culprits named."""

from __future__ import annotations

import pytest

from diagnose.report.model import Report
from diagnose.report.reader import read_report
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import attach_workload, requires_ptrace
from tests.integration.typed import evidence, finding, number

# Beside another test under scripts/test.sh: a neighbour on the cores only adds to the run-queue
# wait and the runnable threads asserted here (lower bounds), and moves no wait site.
pytestmark = [pytest.mark.integration, requires_ptrace]


def diagnose_workload(captures, name: str) -> Report:
    """The 6 s attach of NAME, shared with test_verdicts (same workload, same window; under
    scripts/test.sh, by the tests of the same pass)."""
    return attach_workload(captures, name, seconds="6").report


def test_pure_python_postprocessing_is_named_as_the_gil_holder(captures):
    report = diagnose_workload(captures, "gil_contention")
    assert report.verdict.primary == "gil_contention"
    gil = finding(report, "gil_contention")
    assert gil.sites[0].function == "postprocess"
    assert gil.sites[0].file.endswith("gil_contention.py")
    assert evidence(gil, "gil_wait_share") > 0.3
    assert evidence(gil, "gil_wait_share_per_thread")
    waits = report.waits
    assert waits[0].kind == "gil" and waits[0].holders[0].function == "postprocess"


def test_connection_pool_acquire_line_and_size_are_named(captures):
    report = diagnose_workload(captures, "pool_wait")
    assert report.verdict.primary == "pool_wait"
    pool = finding(report, "pool_wait")
    top = pool.sites[0]
    assert top.file.endswith("pool_wait.py")
    assert top.line == marker_line(WORKLOADS / "pool_wait.py", "pool-acquire")
    assert evidence(pool, "pool_size_estimate") == 2
    wait = report.waits[0]
    assert wait.kind == "queue" and "Connection.query" in wait.holders[0].stack


def test_logging_handler_and_its_call_site_are_named(captures):
    report = diagnose_workload(captures, "logging_lock")
    assert report.verdict.primary == "logging_lock"
    logging_finding = finding(report, "logging_lock")
    assert evidence(logging_finding, "handler").endswith("emit")
    top = logging_finding.sites[0]
    assert top.line == marker_line(WORKLOADS / "logging_lock.py", "log-call")
    assert any("QueueHandler" in a for a in logging_finding.advice)


def test_growing_memory_with_saturated_workers_is_an_unbounded_backlog(captures):
    report = diagnose_workload(captures, "unbounded_backlog")
    assert report.verdict.primary == "unbounded_backlog"
    backlog = finding(report, "unbounded_backlog")
    assert evidence(backlog, "rss_growth_mb_per_s") > 1
    assert any(s.file.endswith("unbounded_backlog.py") for s in backlog.sites)


def test_blas_mutex_is_fan_out_not_python_lock_contention(captures):
    report = diagnose_workload(captures, "blas_fanout")
    assert report.verdict.primary == "scheduler_overhead"
    lock = finding(report, "lock_contention")
    assert lock.severity == "ok"
    fan = finding(report, "scheduler_overhead")
    assert evidence(fan, "intra_op_libraries") == "OpenBLAS"
    assert number(fan, "native_mutex_wait_share") > 0.3
    assert number(fan, "request_threads") >= 4 and number(fan, "intra_op_threads") >= 1


# It reads the cores' run queue, so it runs in the serial pass, where it also shares the 64-thread
# capture of test_verdicts' scheduler test instead of attaching a second time beside a neighbour.
@pytest.mark.serial
def test_fan_out_numbers_threads_cores_and_run_queue_wait_are_reported(captures):
    report = diagnose_workload(captures, "scheduler_overhead")
    assert report.verdict.primary == "scheduler_overhead"
    fan = finding(report, "scheduler_overhead")
    assert number(fan, "threads") >= 64
    assert number(fan, "usable_cores") >= 1
    assert number(fan, "runqueue_wait_s") > 0
    assert number(fan, "runnable_per_core") > 2
    advice = finding(report, "scheduler_overhead").advice
    assert any("usable cores" in a for a in advice)


def test_wait_sites_and_holders_appear_in_the_html_report(captures):
    capture = attach_workload(captures, "lock_contention", seconds="6")
    report = capture.report
    html = next(capture.out_dir.glob("*.html"))
    assert 'id="diagnose-data"' in html.read_text(encoding="utf-8"), "the page has no data block"
    # the page carries the wait sites themselves, not merely a (possibly empty) "waits" key
    assert read_report(html).waits == report.waits
    assert report.waits
    top = report.waits[0]
    assert top.kind == "lock" and top.holders
    assert "the holder was in Model.predict" in top.summary
