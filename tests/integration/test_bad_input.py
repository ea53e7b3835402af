"""Bad input gets a clear message and its own exit code; collected samples are never lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from diagnose.errors import ExitCode
from tests.conftest import invoke_cli, run_cli
from tests.integration.conftest import CliRun, requires_ptrace, running, workload_command
from tests.integration.typed import as_report, read_report

# The exact files a default attach writes, and none beside them: attaches at their defaults.
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("keep_raw_off")]


def _unused_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: nothing runs under this pid now


def test_missing_pid_exits_with_no_such_process(out_dir):
    pid = _unused_pid()
    proc, _ = run_cli("attach", pid, "--duration", "2", "--output-dir", out_dir)
    assert proc.returncode == ExitCode.NO_SUCH_PROCESS
    assert f"no process with pid {pid}" in proc.stderr
    assert "Traceback" not in proc.stderr


@requires_ptrace
@pytest.mark.parametrize("after", ["", "; exit $?"], ids=["exec-d-into-diagnose", "shell-parent"])
def test_attaching_the_shell_that_runs_diagnose_refuses_to_sample_diagnose_itself(out_dir, after):
    # `diagnose attach $$` from a shell: the shell's only Python descendant is diagnose (a lone
    # command is exec'd by bash, so $$ is diagnose's own pid; with another command after it,
    # the shell stays its parent).
    command = f"{sys.executable} -m diagnose attach $$ --duration 2 --output-dir {out_dir}{after}"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert proc.returncode == ExitCode.NOT_PYTHON, proc.stderr[-1500:]
    assert "diagnose itself" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(out_dir.glob("*.html"))  # no report of diagnose's own threads


def test_attaching_diagnoses_own_pid_is_refused_in_process():
    import os

    from diagnose.collect.capture import resolve_probe_pid
    from diagnose.errors import NotPython

    with pytest.raises(NotPython, match="diagnose itself"):
        resolve_probe_pid(os.getpid(), children=True, retry_s=0)


@requires_ptrace
def test_non_python_process_exits_with_not_python(out_dir):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        proc, _ = run_cli("attach", sleeper.pid, "--duration", "2", "--output-dir", out_dir)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == ExitCode.NOT_PYTHON
    assert "is not a Python process" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("content", ["hello, this is not a profile\n", '{"some": "json"}', ""])
def test_file_that_is_not_a_profile_exits_with_bad_profile(tmp_path, out_dir, content):
    bogus = tmp_path / "bogus.txt"
    bogus.write_text(content)
    proc, _ = invoke_cli("analyze", bogus, "--output-dir", out_dir)
    assert proc.returncode == ExitCode.BAD_PROFILE
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr
    assert not out_dir.exists() or not any(out_dir.iterdir())


@requires_ptrace
def test_target_exiting_mid_window_still_writes_a_partial_report(out_dir):
    with running(workload_command("lock_contention", "--seconds", "120")) as pid:
        attach = CliRun("attach", pid, "--duration", "20", "--json", "--output-dir", out_dir)
        # Ended once the window is under way, however long the start-up took on this machine.
        assert attach.wait_for("sampled 20%"), attach.finish(timeout=5)[0].stderr
        os.kill(pid, signal.SIGKILL)
        proc, data = attach.finish()
    assert proc.returncode == ExitCode.TARGET_EXITED, proc.stderr
    assert "exited during sampling" in proc.stderr
    report = as_report(data)
    assert report.sampling.partial is True
    assert report.sampling.thread_samples > 0
    assert report.verdict.primary == "lock_contention"
    html = list(out_dir.glob("diagnose-*.html"))
    assert len(html) == 1
    # the page's own data says so (the word "partial" alone is in its inlined script anyway)
    assert 'id="diagnose-data"' in html[0].read_text(encoding="utf-8"), "the page has no data block"
    assert read_report(html[0]).sampling.partial is True
    assert read_report(next(out_dir.glob("diagnose-*[0-9].json"))).sampling.partial is True
