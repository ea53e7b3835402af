"""The kernel's work and the children's CPU, on real processes (issue 44):
fixtures/workloads/syscall_heavy.py (four request threads writing each response line by line
through an unbuffered file: about half the CPU is system time) and
fixtures/workloads/fresh_buffers.py (four request threads copying each frame into a fresh 48 MB
buffer: most of the CPU is the kernel's page faults, in no system call) and
fixtures/workloads/spawn_per_request.py (a `sha256sum` child per request: about half the CPU is
the children's, each gone within milliseconds). Without the kernel's counters the verdicts would
be the GIL's waits and the busy threads' Python; the verdicts name the kernel's work at the
writing line and the children (their command) at the line that starts them.

Attaches the real CLI (`diagnose attach --duration 3 --json`) on CPython 3.11 and, where pyenv
has them, 3.12 and 3.13 (the fixtures are standard library only), and asserts what the tool
decided, never a measured speed-up (benchmarks/advice_gain.py measures those).
"""

from __future__ import annotations

import json

import pytest

from diagnose.report.model import Report
from diagnose.vocab import CpuPart
from tests.conftest import WORKLOADS, marker_line
from tests.integration import pythons
from tests.integration.conftest import requires_ptrace, running, workload_command
from tests.integration.typed import evidence, finding, run_report

pytestmark = [pytest.mark.integration, requires_ptrace]

VERSIONS = ("3.11", "3.12", "3.13")


def interpreter(version: str) -> str:
    found = pythons.find_python(version)
    if found is None:
        pytest.skip(f"no CPython {version} on this machine")
    supported, why = pythons.py_spy_supports(found.version)
    if not supported:
        pytest.skip(why)
    return found.executable


def brief(report: Report) -> str:
    return json.dumps({"verdict": report.verdict,
                       "findings": [(f.id, f.score, f.predicted_gain, f.summary, (f.advice or [""])[0])
                                    for f in report.findings][:5]}, indent=1, default=str)[:8000]


def attach(name: str, python: str, tmp_path) -> Report:
    with running(workload_command(name, "--seconds", "60", python=python)) as pid:
        proc, report = run_report("attach", pid, "--duration", "3", "--json", "-o", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert report is not None
    return report


@pytest.mark.parametrize("version", VERSIONS)
def test_a_service_whose_cpu_goes_to_system_calls_is_told_to_make_fewer_at_the_line(version, tmp_path):
    report = attach("syscall_heavy", interpreter(version), tmp_path)
    assert report.verdict.primary == "kernel_work", brief(report)
    found = finding(report, "kernel_work")
    share = evidence(found, "kernel_share")
    assert isinstance(share, float) and share >= 0.3, brief(report)
    line = marker_line(WORKLOADS / "syscall_heavy.py", "spool-write")
    assert found.sites and (found.sites[0].function, found.sites[0].line) == ("write_response", line), brief(report)
    syscalls = evidence(found, "syscalls")
    assert isinstance(syscalls, dict) and next(iter(syscalls)) == "write", brief(report)
    assert report.verdict.first_advice[0].startswith("Make fewer system calls at write_response"), brief(report)
    assert found.predicted_gain is not None and found.predicted_gain > 1.2, brief(report)
    account = report.cpu_account
    assert account is not None, brief(report)
    kernel = account.part(CpuPart.KERNEL)
    assert kernel is not None and kernel.share is not None and kernel.share >= 0.3, account


@pytest.mark.parametrize("version", VERSIONS)
def test_a_service_whose_kernel_time_is_page_faults_is_told_to_reuse_its_buffers_at_the_copying_line(
        version, tmp_path):
    report = attach("fresh_buffers", interpreter(version), tmp_path)
    assert report.verdict.primary == "kernel_work", brief(report)
    found = finding(report, "kernel_work")
    faults = evidence(found, "minor_faults_per_s")
    assert isinstance(faults, float) and faults >= 10_000, brief(report)
    line = marker_line(WORKLOADS / "fresh_buffers.py", "fresh-buffer")
    assert found.sites and (found.sites[0].function, found.sites[0].line) == ("handle", line), brief(report)
    assert report.verdict.first_advice[0].startswith("Stop mapping and unmapping memory on every call at handle"), \
        brief(report)
    assert [f.knob for f in found.fixes] == ["reuse_memory"], brief(report)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_service_whose_cpu_goes_to_short_lived_children_is_told_what_they_were_and_where(version, tmp_path):
    report = attach("spawn_per_request", interpreter(version), tmp_path)
    assert report.verdict.primary == "children_cpu", brief(report)
    found = finding(report, "children_cpu")
    share = evidence(found, "children_share")
    assert isinstance(share, float) and share >= 0.25, brief(report)
    line = marker_line(WORKLOADS / "spawn_per_request.py", "spawn-child")
    assert found.sites and (found.sites[0].function, found.sites[0].line) == ("fingerprint", line), brief(report)
    commands = evidence(found, "child_commands")
    assert isinstance(commands, dict) and "sha256sum" in commands, brief(report)
    assert "sha256sum" in report.verdict.first_advice[0], brief(report)
    forks = evidence(found, "machine_forks")
    assert isinstance(forks, int) and forks >= evidence(found, "children_seen", 0), brief(report)
    assert found.predicted_gain is not None and found.predicted_gain > 1.2, brief(report)
    account = report.cpu_account
    assert account is not None, brief(report)
    reaped = account.part(CpuPart.REAPED)
    assert reaped is not None and reaped.share is not None and reaped.share >= 0.25, account
