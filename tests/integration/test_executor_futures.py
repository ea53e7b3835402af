"""Futures an executor's threads resolve, on a real asyncio process
(fixtures/workloads/async_executor.py: 64 request tasks awaiting a 20 ms blocking lookup offloaded
to a thread pool of 6): the request tasks wait on a future, and what serves it is the executor's
threads, every one asleep in the lookup. The verdict names the executor and its size, not "the
task that resolves it".

Attaches the real CLI (`diagnose attach --duration 4 --json`); asserts what the tool decided.
"""

from __future__ import annotations

import json
import sys

import pytest

from diagnose.report.model import Report
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace,
              pytest.mark.skipif(sys.version_info < (3, 11),
                                 reason="the task reader reads CPython 3.11-3.13 targets")]


def brief(report: Report) -> str:
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.summary, (f.advice or [""])[0])
                                    for f in report.findings][:5]}, indent=1, default=str)[:8000]


@pytest.mark.parametrize("executor", ["default", "named", "to_thread"])
def test_requests_awaiting_a_full_executor_are_told_to_give_it_more_workers(tmp_path, executor: str) -> None:
    with running(workload_command("async_executor", "--seconds", "120", "--executor", executor)) as pid:
        proc, report = run_report("attach", pid, "--duration", "4", "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "async_wait", brief(report)
    found = finding(report, "async_wait")
    assert evidence(found, "holder_threads") == 6, brief(report)
    advice = found.advice[0]
    assert "executor is the limit" in advice and "max_workers" in advice, brief(report)
    assert "bigger batches" not in advice, brief(report)
