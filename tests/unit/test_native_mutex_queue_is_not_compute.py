"""Request threads queued on a native library's internal mutex wait; they do not compute.

OpenBLAS lets one caller at a time into its thread pool: a threaded service whose request threads
all call it queues them on that mutex, and the cores idle between calls. compute_bound says the
cores already run the model and nothing but a cheaper model or more cores helps; that holds only
for the share of the request threads' time not queued there. The recording is one attach of
fixtures/servers/blas_service.py (fixtures/recorded/blas_service/README.md) in which the
counters did not overrule the samples and compute_bound scored 100, tied with the fan-out's
scheduler_overhead; CI's attach of the same service led with it."""

from __future__ import annotations

import pytest

from diagnose.report.model import Report
from tests.replay import replay

CASE, NAME = "blas_service", "mutex_queue_at_two_cores_a_third_idle"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Report:
    return replay(CASE, NAME, tmp_path_factory.mktemp("replay"))


def _finding(report: Report, check_id: str):
    return next(f for f in report.findings if f.id == check_id)


def test_the_fan_out_into_openblas_leads_with_its_thread_knob(report):
    first = report.findings[0]
    assert first.id == "scheduler_overhead"
    assert [(f.knob, f.value) for f in first.fixes] == [("OPENBLAS_NUM_THREADS", 1)]


def test_compute_bound_keeps_only_the_share_not_queued_on_the_librarys_mutex(report):
    compute = _finding(report, "compute_bound")
    queued = compute.evidence["native_mutex_wait_share"]
    assert queued > 0.5  # the recording's premise: most of the request threads' time queued
    assert compute.score <= round(100 * (1 - queued)) + 1
    assert "queue" in compute.summary
