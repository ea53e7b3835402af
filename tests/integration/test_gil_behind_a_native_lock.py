"""Threads that queue for the GIL behind a native lock, on a real process
(fixtures/workloads/sqlite_shared_connection.py: 8 request threads querying one SQLite connection).
The sqlite3 module keeps the GIL while it binds parameters and reads columns, and those calls
take the connection's mutex, held by the thread running a query without the GIL. The verdict
follows the GIL to its holder, named by the interpreter's own state at each tick (CPython
3.11-3.13), finds it blocked on a lock while another thread runs, and says to give each thread
its own connection; never "vectorise" or "busy in Python".

Attaches the real CLI and asserts what the tool decided, never a throughput.
"""

from __future__ import annotations

import json

import pytest

from diagnose.report.model import Report
from tests.integration import pythons
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]


def brief(report: Report) -> str:
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.summary, (f.advice or [""])[0])
                                    for f in report.findings][:5]}, indent=1, default=str)[:8000]


@pytest.mark.parametrize("minor", ("3.11", "3.12", "3.13"))
def test_threads_sharing_one_sqlite_connection_are_told_to_give_each_its_own(minor, tmp_path) -> None:
    interpreter = pythons.find_python(minor)
    if interpreter is None:
        pytest.skip(f"no CPython {minor} on this machine")
    supported, why = pythons.py_spy_supports(interpreter.version)
    if not supported:
        pytest.skip(why)
    command = workload_command("sqlite_shared_connection", "--seconds", "120",
                               python=interpreter.executable)
    with running(command) as pid:
        proc, report = run_report("attach", pid, "--duration", "5", "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    assert report.verdict.primary == "gil_contention", brief(report)
    gil = finding(report, "gil_contention")
    # the holder named by the interpreter, blocked on a lock another thread holds while it runs
    assert "read from the interpreter" in gil.summary, brief(report)
    assert "without the GIL" in gil.summary, brief(report)
    assert float(str(evidence(gil, "gil_holder_blocked_share"))) >= 0.5, brief(report)
    assert "Give each thread its own" in gil.advice[0], brief(report)
    assert gil.sites and gil.sites[0].function == "category_summary", brief(report)
    assert evidence(gil, "fix") == {"knob": "per_thread_instance", "value": "category_summary"}, brief(report)
    busy = report.finding("cpu_bound")
    assert busy is None or busy.score < 25, brief(report)
