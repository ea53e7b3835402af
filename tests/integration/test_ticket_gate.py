"""The CI gate on live targets: `attach --fail-on critical` exits 10 on a contended service and
0 on an idle one, with every output written either way (and the ticket summary beside them)."""

from __future__ import annotations

import sys

from tests.conftest import REPO, run_cli
from tests.integration.conftest import requires_ptrace, running, workload_command

pytestmark = requires_ptrace


def _outputs(out_dir) -> set[str]:
    return {p.name.split(".", 1)[1] for p in out_dir.iterdir()}


def test_fail_on_critical_exits_10_on_a_contended_service_with_outputs_written(out_dir):
    with running(workload_command("lock_contention", "--seconds", "40")) as pid:
        proc, _ = run_cli("attach", pid, "--duration", "3", "--fail-on", "critical",
                          "-o", out_dir, check_json=False)
    assert proc.returncode == 10, proc.stderr
    assert "fail-on critical: the verdict is critical (lock_contention)" in proc.stderr
    assert {"html", "json", "speedscope.json", "md"} <= _outputs(out_dir)


def test_fail_on_critical_exits_0_on_an_idle_service(out_dir):
    sleepers = REPO / "fixtures" / "sanity" / "sleepers.py"
    with running([sys.executable, str(sleepers), "--seconds", "40"]) as pid:
        proc, _ = run_cli("attach", pid, "--duration", "3", "--fail-on", "critical",
                          "-o", out_dir, check_json=False)
    assert proc.returncode == 0, proc.stderr
    assert "fail-on" not in proc.stderr
    assert {"html", "json", "speedscope.json", "md"} <= _outputs(out_dir)
