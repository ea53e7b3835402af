"""Each fixture's verdict beside a declared neighbour: a CPU hog (a pure-Python busy loop at normal
priority) pinned to one core, started before the fixture and stopped after it. Load is a test
condition here, not an accident of which tests share the cores: every check's evidence must
survive a machine where another process takes a core, as a production host's other jobs do.

Each test attaches the real CLI as tests/integration/test_verdicts.py does and asserts the one
verdict the fixture was built to provoke, at its marked site where the fixture's own live test
checks one. These tests run in the normal parallel pass (never `serial`): the neighbour is the
declared load, whatever else shares the machine.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from diagnose.report.model import Report
from tests.conftest import WORKLOADS, marker_line
from tests.integration import pythons
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.test_async_workloads import check_async_wait
from tests.integration.test_cpu_quota import QUOTA_CORES, quota_group  # noqa: F401 (a fixture)
from tests.integration.servers import free_port
from tests.integration.test_deadlock import check_deadlock
from tests.integration.typed import evidence, finding, number, outcome, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]

SECONDS = "6"  # the fixtures' own live tests' window (test_verdicts.py), 4 where theirs is shorter
SHORT_SECONDS = "4"
HOG = "while True: pass"


@dataclass(frozen=True)
class Neighbour:
    """The declared load: one process spinning in pure Python on one core."""

    pid: int
    core: int

    def cpu_s(self) -> float:
        """The neighbour's CPU time so far (utime + stime)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spinning(hog: Neighbour, timeout: float = 10.0) -> bool:
    """True once the hog has spent a tenth of a second on its core: its loop runs, not its start-up
    alone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hog.cpu_s() >= 0.1:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def neighbour() -> Iterator[Neighbour]:
    """A busy loop pinned to the first usable core at the test's own priority, spinning before the
    fixture starts; killed and reaped after."""
    core = min(os.sched_getaffinity(0))
    proc = subprocess.Popen([sys.executable, "-c", HOG])
    try:
        os.sched_setaffinity(proc.pid, {core})
        hog = Neighbour(proc.pid, core)
        assert _spinning(hog), "the neighbour never got its core"
        yield hog
        assert proc.poll() is None, "the neighbour stopped before the attach ended"
    finally:
        proc.kill()
        proc.wait()


def brief(report: Report) -> str:
    """What to print when a verdict is wrong: the verdict and each scoring finding's figures."""
    return json.dumps({"verdict": report.verdict, "notes": report.sampling.notes,
                       "findings": [(f.id, f.score, f.severity, f.summary,
                                     [(s.file.rsplit("/", 1)[-1], s.line, s.function) for s in f.sites[:3]])
                                    for f in report.findings if f.score > 0]},
                      indent=1, default=str)


def attach_beside(hog: Neighbour, command: list[str], out_dir: Path, seconds: str = SECONDS) -> Report:
    """`diagnose attach --json` on the program `command` starts, while the neighbour spins."""
    with running(command, ready_timeout=120) as pid:
        proc, report = run_report("attach", pid, "--duration", seconds, "--json", "--output-dir", out_dir)
    assert proc.returncode == 0 and report is not None, proc.stderr[-3000:]
    assert os.sched_getaffinity(hog.pid) == {hog.core}
    return report


def workload_beside(hog: Neighbour, name: str, out_dir: Path, *args: str, seconds: str = SECONDS,
                    python: str | None = None) -> Report:
    command = workload_command(name, "--seconds", "120", *args, python=python)
    return attach_beside(hog, command, out_dir, seconds)


def site_line(name: str, tag: str) -> int:
    return marker_line(WORKLOADS / f"{name}.py", tag)


def test_global_model_lock_beside_a_busy_core_is_lock_contention_at_the_acquire(neighbour, out_dir):
    report = workload_beside(neighbour, "lock_contention", out_dir)
    assert report.verdict.primary == "lock_contention", brief(report)
    top = finding(report, "lock_contention").sites[0]
    assert top.file.endswith("lock_contention.py"), brief(report)
    assert top.line == site_line("lock_contention", "contended-acquire"), brief(report)


def test_pixel_loops_beside_a_busy_core_are_preprocess_bound(neighbour, out_dir):
    report = workload_beside(neighbour, "preprocess_bound", out_dir)
    assert report.verdict.primary == "preprocess_bound", brief(report)


def test_pure_python_postprocessing_beside_a_busy_core_is_named_as_the_gil_holder(neighbour, out_dir):
    report = workload_beside(neighbour, "gil_contention", out_dir)
    assert report.verdict.primary == "gil_contention", brief(report)
    top = finding(report, "gil_contention").sites[0]
    assert top.function == "postprocess" and top.file.endswith("gil_contention.py"), brief(report)


def test_model_matmuls_beside_a_busy_core_are_compute_bound(neighbour, out_dir):
    report = workload_beside(neighbour, "compute_bound", out_dir)
    assert report.verdict.primary == "compute_bound", brief(report)


def test_sixty_four_busy_threads_beside_a_busy_core_are_scheduler_overhead(neighbour, out_dir):
    report = workload_beside(neighbour, "scheduler_overhead", out_dir)
    assert report.verdict.primary == "scheduler_overhead", brief(report)
    fan = finding(report, "scheduler_overhead")
    assert evidence(fan, "runqueue_wait_per_cpu_second") > 1.0, brief(report)


def test_idle_pool_workers_beside_a_busy_core_are_underloaded_not_lock_contention(neighbour, out_dir):
    report = workload_beside(neighbour, "underloaded", out_dir)
    assert report.verdict.primary == "underloaded", brief(report)
    assert outcome(report, "lock_contention") in ("ok", "not applicable"), brief(report)


def test_connection_pool_beside_a_busy_core_is_pool_wait_at_the_acquire_with_its_size(neighbour, out_dir):
    report = workload_beside(neighbour, "pool_wait", out_dir)
    assert report.verdict.primary == "pool_wait", brief(report)
    pool = finding(report, "pool_wait")
    assert pool.sites[0].line == site_line("pool_wait", "pool-acquire"), brief(report)
    assert evidence(pool, "pool_size_estimate") == 2, pool.evidence


def test_logging_handler_beside_a_busy_core_is_logging_lock_at_the_log_call(neighbour, out_dir):
    report = workload_beside(neighbour, "logging_lock", out_dir)
    assert report.verdict.primary == "logging_lock", brief(report)
    logging_finding = finding(report, "logging_lock")
    assert str(evidence(logging_finding, "handler")).endswith("emit"), logging_finding.evidence
    assert logging_finding.sites[0].line == site_line("logging_lock", "log-call"), brief(report)


def check_unbounded_backlog(report: Report) -> None:
    assert report.verdict.primary == "unbounded_backlog", brief(report)
    backlog = finding(report, "unbounded_backlog")
    assert any(s.file.endswith("unbounded_backlog.py") for s in backlog.sites), brief(report)


def test_growing_memory_with_saturated_workers_beside_a_busy_core_is_an_unbounded_backlog(neighbour, out_dir):
    check_unbounded_backlog(workload_beside(neighbour, "unbounded_backlog", out_dir))


def test_growing_memory_on_cpython_3_13_beside_a_busy_core_is_an_unbounded_backlog(neighbour, out_dir):
    # The case met in the version matrix's parallel pass: 3.13's backlog read as compute_bound or
    # gil_contention three times under load.
    interp = pythons.find_python("3.13")
    if interp is None:
        pytest.skip("no CPython 3.13 on this machine")
    python, reason = pythons.venv_with_numpy(interp.minor_version)
    if python is None:
        pytest.skip(f"CPython {interp.version}: no venv with numpy ({reason})")
    check_unbounded_backlog(workload_beside(neighbour, "unbounded_backlog", out_dir, python=python))


def test_pipeline_with_one_slow_model_stage_beside_a_busy_core_is_stage_bound_at_that_stage(neighbour, out_dir):
    report = workload_beside(neighbour, "pipeline", out_dir)
    assert report.verdict.primary == "stage_bound", brief(report)
    stage = finding(report, "stage_bound")
    assert stage.sites[0].function == "model_stage", brief(report)
    assert report.structure[0].bottleneck == "model_stage", report.structure


def test_threads_taking_two_locks_in_opposite_orders_beside_a_busy_core_are_a_deadlock(neighbour, out_dir):
    check_deadlock(workload_beside(neighbour, "deadlock_two_locks", out_dir, seconds=SHORT_SECONDS),
                   "deadlock_two_locks")


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the task reader reads CPython 3.11-3.13 targets")
def test_request_tasks_on_a_semaphore_beside_a_busy_core_are_an_async_wait_at_the_async_with(neighbour, out_dir):
    check_async_wait(workload_beside(neighbour, "async_semaphore", out_dir, seconds=SHORT_SECONDS))


def test_four_busy_threads_under_half_a_core_beside_a_busy_core_are_cpu_throttled(
        neighbour, quota_group, out_dir):  # noqa: F811 (the fixture imported above)
    # started inside the test's group, as test_cpu_quota.py does; the workload leaves it alone
    script = WORKLOADS / "cpu_quota.py"
    command = (f"echo $$ > {shlex.quote(str(quota_group / 'cgroup.procs'))} && exec "
               f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --seconds 120 --cpu-quota 0")
    report = attach_beside(neighbour, ["sh", "-c", command], out_dir, seconds=SHORT_SECONDS)
    assert report.verdict.primary == "cpu_throttled", brief(report)
    throttled = finding(report, "cpu_throttled")
    assert evidence(throttled, "cgroup_cpu_quota_cores") == QUOTA_CORES, throttled.evidence
    if evidence(throttled, "room_below_quota"):
        # The neighbour and the other load of the pass left less CPU than the quota (measured:
        # its CPU plus the machine's idle cores): the quota rarely ran out, and the report says
        # the machine's load hid it instead of trading the quota for another verdict.
        assert "other processes' load left it" in throttled.summary, throttled.summary
    else:
        assert number(throttled, "throttled_period_share") > 0.5, throttled.evidence


def test_locked_model_with_a_blas_pool_beside_a_busy_core_is_lock_contention_advising_one_blas_thread(
        neighbour, out_dir):
    report = workload_beside(neighbour, "locked_blas", out_dir)
    assert report.verdict.primary == "lock_contention", brief(report)
    lock = finding(report, "lock_contention")
    assert lock.sites[0].line == site_line("locked_blas", "contended-acquire"), brief(report)
    assert "OPENBLAS_NUM_THREADS=1" in report.verdict.first_advice[0], report.verdict.first_advice


def test_threads_waiting_on_a_local_backend_at_capacity_beside_a_busy_core_name_the_backend(neighbour, out_dir):
    port = str(free_port())
    with running(workload_command("feature_backend", "--seconds", "120", "--port", port)) as backend:
        report = workload_beside(neighbour, "remote_backend", out_dir, "--port", port, seconds=SHORT_SECONDS)
    assert report.verdict.primary == "backend_saturated", brief(report)
    assert f"pid {backend}" in str(evidence(finding(report, "backend_saturated"), "backend")), brief(report)
