"""A profile recorded with py-spy's defaults (no --idle) drops every waiting sample: `analyze`
must say it cannot show waits instead of calling a lock-bound service compute-bound."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import as_report

pytestmark = requires_ptrace


def _pyspy() -> str:
    from diagnose.collect.pyspy import pyspy_binary
    return pyspy_binary()


def test_a_recording_without_idle_of_a_lock_bound_service_is_inconclusive(tmp_path):
    profile = tmp_path / "default.speedscope.json"
    with running(workload_command("lock_contention", "--seconds", "40")) as pid:
        record = subprocess.run([_pyspy(), "record", "--pid", str(pid), "--duration", "4",
                                 "--format", "speedscope", "--output", str(profile), "--nonblocking"],
                                capture_output=True, text=True, timeout=60)
    assert record.returncode == 0, record.stderr
    proc = subprocess.run([sys.executable, "-m", "diagnose", "analyze", str(profile), "--json",
                           "-o", str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    report = as_report(json.loads(proc.stdout))
    verdict = report.verdict
    assert verdict.primary == "inconclusive", verdict
    assert "cannot show waits" in verdict.headline and "--idle" in verdict.headline
    assert verdict.severity != "critical"
    # Its window is not the busiest thread's samples laid end to end, passed off as measured.
    assert report.sampling.duration_s is None or report.sampling.duration_s >= 3.5
