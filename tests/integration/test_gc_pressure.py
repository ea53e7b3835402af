"""The cyclic garbage collector, on a real process (fixtures/workloads/gc_heavy.py: a catalog of
2,000,000 tracked containers, four request threads whose cached candidates outlive young
collections): the collector's time lands on the allocating line, and without native frames the
verdict would be the GIL's waits behind it. The verdict names the collector, advises freezing
the long-lived heap first, and the report accounts for the CPU the collector took.

Attaches the real CLI (`diagnose attach --duration 4 --json`) and asserts what the tool decided,
never a measured speed-up (benchmarks/gc_share.py and benchmarks/advice_gain.py measure those).
"""

from __future__ import annotations

import json
import time

import pytest

from diagnose.vocab import CpuPart
from diagnose.report.model import Report
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]


def brief(report: Report) -> str:
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.summary, (f.advice or [""])[0])
                                    for f in report.findings][:5]}, indent=1, default=str)[:8000]


def test_a_service_whose_collector_traverses_a_large_heap_is_told_to_freeze_it(tmp_path) -> None:
    with running(workload_command("gc_heavy", "--seconds", "120")) as pid:
        proc, report = run_report("attach", pid, "--duration", "4", "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "gc_pressure", brief(report)
    assert "gc.freeze()" in report.verdict.first_advice[0], brief(report)
    gc = finding(report, "gc_pressure")
    assert [f.knob for f in gc.fixes] == ["gc_freeze", "gc_threshold"], brief(report)
    assert gc.predicted_gain is not None and gc.predicted_gain > 1.0, brief(report)
    # read from the process's memory: the window's share with a collection in progress, and the
    # collections of each generation
    assert gc.basis_key == "collector_held_share", brief(report)
    collections = evidence(gc, "collections")
    assert isinstance(collections, dict) and collections["young"] > 0, brief(report)
    account = report.cpu_account
    assert account is not None, brief(report)
    collector = account.part(CpuPart.COLLECTOR)
    assert collector is not None and collector.cpu_s is not None and collector.cpu_s > 0, account
    assert sum(p.cpu_s or 0.0 for p in account.parts) == pytest.approx(account.cpu_s, abs=0.05), account


def test_the_collectors_state_is_read_from_a_live_process_without_stopping_it() -> None:
    """The reader (collect/gc_state.py) on a process that collects all the time: its polls find
    collections in progress, and its counters count each generation's."""
    from diagnose.collect.gc_state import GcStateSampler

    with running(workload_command("gc_heavy", "--seconds", "60", "--heap", "200000")) as pid:
        sampler = GcStateSampler(pid)
        sampler.start()
        time.sleep(2.0)
        record = sampler.finish()
    assert record.unreadable is None, record
    assert record.polls >= 50 and record.failed_polls == 0, record
    assert record.collecting_share is not None and 0 < record.collecting_share < 1, record
    assert record.collections is not None and record.collections[0] > 0, record


def test_the_collectors_polls_and_counts_restart_when_the_window_opens() -> None:
    """What the reader counts before the window (the recorders' start-up) is dropped: after
    window_opened its polls and collections cover only the time since."""
    from diagnose.collect.gc_state import POLL_HZ, GcStateSampler

    with running(workload_command("gc_heavy", "--seconds", "60", "--heap", "200000")) as pid:
        sampler = GcStateSampler(pid)
        sampler.start()
        time.sleep(2.0)
        sampler.window_opened()
        time.sleep(1.0)
        record = sampler.finish()
    assert record.unreadable is None, record
    # about POLL_HZ polls in the second after the window opened, not the three seconds' 150
    assert 0.5 * POLL_HZ <= record.polls <= 1.6 * POLL_HZ, record
    assert record.polled_s <= 1.2, record
    assert record.collections is not None and record.collections[0] > 0, record
