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

import pytest

from diagnose.model.vocab import CpuPart
from diagnose.report.model import Report
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import finding, run_report

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
    assert gc.sites and gc.sites[0].file.endswith("gc_heavy.py"), brief(report)
    account = report.cpu_account
    assert account is not None, brief(report)
    collector = account.part(CpuPart.COLLECTOR)
    assert collector is not None and collector.cpu_s is not None and collector.cpu_s > 0, account
    assert sum(p.cpu_s or 0.0 for p in account.parts) == pytest.approx(account.cpu_s, abs=0.05), account
