"""The waits no running stack shows, on every current CPython version (3.11+) this machine has
besides the running one (test_deadlock.py and test_async_workloads.py attach it):
the deadlock fixtures (held locks read from the source, the wait from the stack: both change with
the interpreter's line numbers and lock frames) and the asyncio workloads (the task reader's
layouts, line tables and asyncio's task sets differ in each version). Each workload is started
with that interpreter's cached venv (`pythons.venv_with_numpy`); the CLI runs on the default
interpreter and attaches the real py-spy, `--duration 3` at the default sampling plan.

The diagnoses of test_python_versions.py's matrix on every version are in that file; this one is
separate so that the two matrices run on two test workers side by side.
"""

from __future__ import annotations

import functools

import pytest

from tests.integration.typed import run_report
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.test_async_workloads import ASYNC_CHECKS
from tests.integration.test_deadlock import CYCLES, check_deadlock
from tests.integration.test_python_versions import OTHER_INTERPRETERS, target_python

pytestmark = [pytest.mark.integration, requires_ptrace]

CURRENT_CHECKS = {**{name: functools.partial(check_deadlock, workload=name) for name in CYCLES},
                  **ASYNC_CHECKS}
CURRENT_CASES = [pytest.param(interp, workload, id=f"{interp.version}-{workload}")
                 for interp in OTHER_INTERPRETERS if interp.version_info[:2] >= (3, 11)
                 for workload in sorted(CURRENT_CHECKS)]


@pytest.mark.parametrize("interp, workload", CURRENT_CASES)
def test_hidden_waits_on_every_current_python_version(interp, workload, out_dir):
    python = target_python(interp)
    with running(workload_command(workload, "--seconds", "120", python=python)) as pid:
        proc, report = run_report("attach", pid, "--duration", "3", "--json", "--output-dir", out_dir)
    assert proc.returncode == 0 and report is not None, proc.stderr[-3000:]
    CURRENT_CHECKS[workload](report)
