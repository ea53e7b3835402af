"""Each fixture workload, attached by the real CLI, gets the diagnosis it was built to provoke."""

from __future__ import annotations

import pytest

from diagnose.report.model import Report
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import attach_workload, requires_ptrace
from tests.integration.typed import evidence, outcome

pytestmark = [pytest.mark.integration, requires_ptrace]

SAMPLE_SECONDS = "6"


def diagnose_workload(captures, name: str) -> Report:
    """The 6 s attach of NAME, shared with test_wait_analysis (same workload, same window; under
    scripts/test.sh, by the tests of the same pass)."""
    return attach_workload(captures, name, seconds=SAMPLE_SECONDS).report


def test_global_model_lock_is_named_as_the_culprit(captures):
    report = diagnose_workload(captures, "lock_contention")
    assert report.verdict.primary == "lock_contention"
    lock = next(f for f in report.findings if f.id == "lock_contention")
    top = lock.sites[0]
    path = WORKLOADS / "lock_contention.py"
    assert top.file.endswith("lock_contention.py")
    assert top.line == marker_line(path, "contended-acquire")


def test_pixel_loops_in_preprocessing_are_diagnosed_as_preprocess_bound(captures):
    report = diagnose_workload(captures, "preprocess_bound")
    assert report.verdict.primary == "preprocess_bound"


@pytest.mark.serial  # the run queue per core is the evidence: no neighbour on the cores
def test_sixty_four_busy_threads_on_two_cores_are_scheduler_overhead(captures):
    report = diagnose_workload(captures, "scheduler_overhead")
    assert report.verdict.primary == "scheduler_overhead"
    finding = next(f for f in report.findings if f.id == "scheduler_overhead")
    assert evidence(finding, "runqueue_wait_per_cpu_second") > 1.0


@pytest.mark.serial  # "on every core": no neighbour on the cores
def test_model_matmuls_on_every_core_are_compute_bound(captures):
    report = diagnose_workload(captures, "compute_bound")
    assert report.verdict.primary == "compute_bound"


@pytest.mark.serial  # idle workers read as GIL-bound when the cores are taken (seen at load 20-70)
def test_idle_pool_workers_are_underloaded_not_lock_contention(captures):
    report = diagnose_workload(captures, "underloaded")
    assert report.verdict.primary == "underloaded"
    assert outcome(report, "lock_contention") in ("ok", "not applicable")
