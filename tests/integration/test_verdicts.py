"""Each fixture workload, attached by the real CLI, gets the diagnosis it was built to provoke."""

from __future__ import annotations

import pytest

from tests.conftest import WORKLOADS, marker_line, outcome, run_cli
from tests.integration.conftest import requires_ptrace, running, workload_command

pytestmark = [pytest.mark.integration, requires_ptrace]

SAMPLE_SECONDS = "6"


def diagnose_workload(name: str, out_dir, *workload_args: str) -> dict:
    with running(workload_command(name, "--seconds", "180", *workload_args)) as pid:
        proc, report = run_cli("attach", pid, "--duration", SAMPLE_SECONDS, "--json",
                               "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    return report


def test_global_model_lock_is_named_as_the_culprit(out_dir):
    report = diagnose_workload("lock_contention", out_dir)
    assert report["verdict"]["primary"] == "lock_contention"
    lock = next(f for f in report["findings"] if f["id"] == "lock_contention")
    top = lock["sites"][0]
    path = WORKLOADS / "lock_contention.py"
    assert top["file"].endswith("lock_contention.py")
    assert top["line"] == marker_line(path, "contended-acquire")


def test_pixel_loops_in_preprocessing_are_diagnosed_as_preprocess_bound(out_dir):
    report = diagnose_workload("preprocess_bound", out_dir)
    assert report["verdict"]["primary"] == "preprocess_bound"


def test_sixty_four_busy_threads_on_two_cores_are_scheduler_overhead(out_dir):
    report = diagnose_workload("scheduler_overhead", out_dir)
    assert report["verdict"]["primary"] == "scheduler_overhead"
    finding = next(f for f in report["findings"] if f["id"] == "scheduler_overhead")
    assert finding["evidence"]["runqueue_wait_per_cpu_second"] > 1.0


def test_model_matmuls_on_every_core_are_compute_bound(out_dir):
    report = diagnose_workload("compute_bound", out_dir)
    assert report["verdict"]["primary"] == "compute_bound"


def test_idle_pool_workers_are_underloaded_not_lock_contention(out_dir):
    report = diagnose_workload("underloaded", out_dir)
    assert report["verdict"]["primary"] == "underloaded"
    assert outcome(report, "lock_contention") in ("ok", "not applicable")
