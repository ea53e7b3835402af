"""Programs of the kinds py-spy's own tests sample (busy loop, recursion, sleepers, thread
churn): a saturated thread is a bottleneck whatever its code is called, and a sleeping process
is described, not given an irrelevant weak finding."""

from __future__ import annotations

import sys

from diagnose.report.model import Finding, Report
from tests.conftest import REPO
from tests.integration.conftest import requires_ptrace, running
from tests.integration.typed import evidence, run_report

SANITY = REPO / "fixtures" / "sanity"
pytestmark = requires_ptrace


def _attach(name: str, out_dir) -> Report:
    with running([sys.executable, str(SANITY / f"{name}.py"), "--seconds", "40"]) as pid:
        proc, report = run_report("attach", pid, "--duration", "3", "--json", "--output-dir", out_dir)
    assert proc.returncode == 0 and report is not None, proc.stderr
    return report


def _primary(report: Report) -> Finding:
    return next(f for f in report.findings if f.id == report.verdict.primary)


def test_a_saturated_thread_is_cpu_bound_and_its_hot_function_is_named(out_dir):
    report = _attach("busy_loop", out_dir)
    assert report.verdict.primary == "cpu_bound", report.verdict
    assert "collatz_steps" in [s.function for s in _primary(report).sites]
    assert evidence(_primary(report), "python_share_of_busy") > 0.5


def test_a_recursion_past_the_frame_stacks_edge_is_the_kernels_work_mapping_memory(out_dir):
    # 400 frames deep, CPython maps a chunk of its frame stack on the way down and unmaps it on
    # the way back: half the process's CPU is system time (measured: 400 deep 49%, 100 deep 0%).
    # The counters outrank the samples' "running pure Python".
    report = _attach("recursion", out_dir)
    assert report.verdict.primary == "kernel_work", report.verdict
    found = _primary(report)
    assert "descend" in [s.function for s in found.sites]
    assert set(evidence(found, "syscalls")) <= {"mmap", "munmap", "mremap", "madvise", "brk"}, found.evidence
    assert found.advice[0].startswith("Stop mapping and unmapping memory"), found.advice[0]


def test_sleeping_threads_get_no_finding_and_a_headline_that_says_they_slept(out_dir):
    report = _attach("sleepers", out_dir)
    assert report.verdict.primary == "none", report.verdict
    headline = report.verdict.headline
    assert headline.startswith("No clear bottleneck")
    assert "sleep" in headline, headline
    assert "memory" not in headline


def test_threads_that_come_and_go_still_give_a_report(out_dir):
    report = _attach("thread_churn", out_dir)
    # Short-lived threads were seen beside the main thread (py-spy reuses a finished thread's
    # id, so many threads share a few rows); waiting for them to start and finish (an Event, a
    # join) is waiting for their work, never lock contention.
    assert len(report.threads) >= 2
    assert any(t.name != "MainThread" for t in report.threads)
    assert report.verdict.primary not in ("lock_contention", "pool_wait")
    # The main thread's join is the largest wait when waits are listed (it can also be parked
    # in join nearly the whole window, then it is no request wait at all); the threads' own
    # start-up handshake may show a brief lock inside threading.py, never the main wait.
    if report.waits:
        largest = max(report.waits, key=lambda w: w.share)
        assert largest.kind in ("join", "event", "gil"), report.waits
