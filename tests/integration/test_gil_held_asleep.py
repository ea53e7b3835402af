"""A GIL held by a thread asleep in a C call, on a real process (fixtures/workloads/gil_held_asleep.py:
8 request threads, each calling libc's usleep through ctypes.PyDLL, which keeps the GIL): the
waiters queue behind a sleep. The verdict follows the GIL to its holder and says it sleeps
holding it; the counters (next to no CPU) confirm that, and no finding calls the threads busy.

Attaches the real CLI (`diagnose attach --duration 4 --json`) and asserts what the tool decided,
never a throughput.
"""

from __future__ import annotations

import json

import pytest

from diagnose.report.model import Report
from tests.conftest import WORKLOADS, marker_line
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]


def brief(report: Report) -> str:
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.summary, (f.advice or [""])[0])
                                    for f in report.findings][:5]}, indent=1, default=str)[:8000]


def test_threads_queued_for_a_gil_held_by_a_sleeping_c_call_are_told_to_release_it_there(tmp_path) -> None:
    with running(workload_command("gil_held_asleep", "--seconds", "120")) as pid:
        proc, report = run_report("attach", pid, "--duration", "4", "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "gil_contention", brief(report)
    gil = finding(report, "gil_contention")
    assert "holding the GIL" in gil.summary, brief(report)
    assert float(str(evidence(gil, "gil_holder_blocked_share"))) >= 0.5, brief(report)
    assert "release it around that call" in gil.advice[0], brief(report)
    assert gil.sites and gil.sites[0].line == marker_line(WORKLOADS / "gil_held_asleep.py", "native-wait"), \
        brief(report)
    busy = report.finding("cpu_bound")
    assert busy is None or busy.score < 25, brief(report)

