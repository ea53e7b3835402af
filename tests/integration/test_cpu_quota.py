"""A real process in a cgroup v1 group with half a core of CPU quota: four busy threads are
throttled, and the attach names the quota (cpu_throttled) with the quota in its evidence."""

from __future__ import annotations

import os
import shlex
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import WORKLOADS
from tests.integration.conftest import requires_ptrace, running
from tests.integration.typed import evidence, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
QUOTA_CORES = 0.5
PERIOD_US = 100_000


def _cgroup_v1_cpu_writable() -> str | None:
    """Why a v1 cpu group cannot be made here, or None when it can."""
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 cpu controller at {CPU_ROOT}"
    if not os.access(CPU_ROOT, os.W_OK) or os.geteuid() != 0:
        return f"{CPU_ROOT} is not writable (making a cpu group needs root)"
    return None


@pytest.fixture
def quota_group():
    """A v1 cpu group with a 0.5-core quota; afterwards its processes go back to the root group
    and the group is removed."""
    reason = _cgroup_v1_cpu_writable()
    if reason:
        pytest.skip(reason)
    group = CPU_ROOT / f"diagnose-test-quota-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cpu group under {CPU_ROOT}: {exc}")
    try:
        (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (group / "cpu.cfs_quota_us").write_text(str(int(QUOTA_CORES * PERIOD_US)))
        yield group
    finally:
        for _ in range(50):
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    (CPU_ROOT / "cgroup.procs").write_text(pid)
                except OSError:  # exited meanwhile
                    pass
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        assert not group.exists(), f"{group} left behind"


@pytest.mark.serial  # the predicted gain is capped by the cores the machine leaves idle
def test_four_busy_threads_under_half_a_core_are_cpu_throttled(quota_group, tmp_path):
    # the workload starts inside the group (sh writes its own pid, then execs Python), and leaves
    # its cgroup alone (--cpu-quota 0): the test made the quota
    script = WORKLOADS / "cpu_quota.py"
    command = (f"echo $$ > {shlex.quote(str(quota_group / 'cgroup.procs'))} && exec "
               f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --seconds 120 --cpu-quota 0")
    with running(["sh", "-c", command]) as pid:
        assert str(pid) in (quota_group / "cgroup.procs").read_text().split()
        proc, report = run_report("attach", pid, "--duration", "4", "--json", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    ranked = [(f.id, f.score, f.predicted_gain) for f in report.findings[:4]]
    finding = next(f for f in report.findings if f.id == "cpu_throttled")
    if finding.predicted_gain >= 1.05:
        assert report.verdict.primary == "cpu_throttled", (report.verdict, ranked)
    else:
        # Other jobs left no core idle, so raising the quota predicts no gain here (the gain is
        # capped by the machine's idle cores): it still leads or follows one other finding.
        assert "cpu_throttled" in [f.id for f in report.findings[:2]], ranked
    assert evidence(finding, "cgroup_cpu_quota_cores") == QUOTA_CORES
    assert evidence(finding, "usable_cores") == QUOTA_CORES
    assert evidence(finding, "cgroup") == f"v1:/{quota_group.name}"
    assert evidence(finding, "throttled_period_share") > 0.5 and evidence(finding, "throttled_s") > 0
    assert finding.severity == "critical"
    assert finding.fixes[0].knob == "cpu_quota_cores"
    assert "OMP_NUM_THREADS=1" in finding.advice[1]
