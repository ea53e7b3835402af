"""Fault injection: whatever happens to a capture, the target is never harmed.

Each case runs the real CLI (`python -m diagnose attach`) against a real service, breaks
something (a signal to diagnose, py-spy killed or missing, a stopped / exiting / zombie /
launcher target) and asserts the exit code, the message, the files written (and that no
temporary one is left), that the target is left running unless its owner stopped it, and that
no py-spy is left running against it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import venv
from pathlib import Path

import psutil
import pytest

from diagnose.collect import target_state
from diagnose.errors import ExitCode
from diagnose.report.model import Report
from tests.conftest import REPO
from tests.integration.conftest import requires_ptrace
from tests.integration.typed import read_report
from tests.ready import wait_ready

# The exact files a default attach writes, and none beside them: attaches at their defaults.
pytestmark = [pytest.mark.integration, requires_ptrace, pytest.mark.usefixtures("keep_raw_off")]

# A small service: request threads contending on one lock, until --seconds have passed or
# SIGUSR1 asks it to exit.
SERVICE = r"""
import os, signal, sys, threading, time
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))
seconds = float(sys.argv[1])
lock = threading.Lock()
def handle():
    with lock:
        sum(i * i for i in range(20000))
def worker():
    while True:
        handle()
        time.sleep(0.001)
for _ in range(4):
    threading.Thread(target=worker, daemon=True).start()
print(f"READY pid={os.getpid()}", flush=True)
# Short sleeps: a signal the kernel hands to a worker thread (the main one ptrace-stopped by a
# native sample at that instant) runs its handler only once the main thread wakes.
end = time.monotonic() + seconds
while time.monotonic() < end:
    time.sleep(0.05)
"""

STOP_TIMEOUT_S = 60  # generous bound on any diagnose run here: none may hang


@pytest.fixture
def procs():
    """Every process a test starts, and their descendants (a launcher's child, diagnose's
    py-spy): all killed (and reaped) at the end, whatever happened."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in reversed(started):
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        for child in descendants:
            try:
                child.kill()
            except psutil.Error:
                pass
        try:
            os.kill(proc.pid, signal.SIGCONT)  # one a test stopped cannot die while stopped
        except OSError:
            pass
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def start_service(procs, seconds: float = 120, launcher: bool = False) -> int:
    """Starts SERVICE (under a bash launcher with `launcher`); returns the pid to attach."""
    command = [sys.executable, "-c", SERVICE, str(seconds)]
    if launcher:  # a second command keeps bash alive as the parent, as wrapper scripts do
        command = ["bash", "-c", '"$@"; echo done', "launcher", *command]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    procs.append(proc)
    wait_ready(proc, 60)
    return proc.pid  # the launcher's, when there is one


def start_diagnose(procs, tmp_path: Path, *args, env=None, python=sys.executable):
    """diagnose in its own process group, as a shell runs a job: a signal sent to the group
    (Ctrl-C, `timeout`, a container stop) reaches it and nothing of the test's."""
    out = tmp_path / "reports"
    stderr_path = tmp_path / "stderr.txt"
    with open(tmp_path / "stdout.txt", "w") as stdout, open(stderr_path, "w") as stderr:
        proc = subprocess.Popen(
            [python, "-m", "diagnose", "attach", *map(str, args), "-o", str(out)],
            stdout=stdout, stderr=stderr, cwd=REPO, env=env, start_new_session=True,
            preexec_fn=_interruptible)
    procs.append(proc)
    return proc, out, stderr_path


def _interruptible() -> None:
    """SIGINT as a terminal's job gets it: a test runner started in the background (`cmd &` in a
    script) ignores SIGINT, its children inherit that, and Python then installs no Ctrl-C
    handler, so the Ctrl-C tests would fail for how the suite was launched."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(stderr_path: Path, text: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while text not in stderr_path.read_text():
        assert proc.poll() is None, f"diagnose exited {proc.returncode}: {stderr_path.read_text()}"
        assert time.monotonic() < deadline, f"no {text!r} in: {stderr_path.read_text()}"
        time.sleep(0.05)


def finish(proc: subprocess.Popen, tmp_path: Path) -> str:
    proc.wait(timeout=STOP_TIMEOUT_S)
    stderr = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in stderr, stderr
    return stderr


def pyspy_against(pid: int) -> list[str]:
    """py-spy processes still reading `pid` (others' py-spy runs on this machine are ignored)."""
    found = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        is_pyspy = "py-spy" in (proc.info["name"] or "") or cmdline[:1] == ["py-spy"] or (
            cmdline and cmdline[0].endswith("/py-spy"))
        if is_pyspy and str(pid) in cmdline:
            found.append(" ".join(cmdline))
    return found


def thread_states(pid: int) -> str:
    state = target_state.process_state(pid)
    return "".join(state.threads.values()) if state else ""


def assert_left_running(pid: int) -> None:
    states = thread_states(pid)
    assert states and not set(states) & {"t", "T"}, f"target {pid} left in states {states}"
    assert not pyspy_against(pid), pyspy_against(pid)


def assert_no_temporary_files(out: Path) -> None:
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")] if out.exists() else []
    assert not leftovers, leftovers


def report_of(out: Path) -> Report:
    html = list(out.glob("diagnose-*.html"))
    assert len(html) == 1, list(out.iterdir())
    assert len(list(out.glob("diagnose-*[0-9].speedscope.json"))) == 1  # not the native samples
    return read_report(html[0].with_suffix(".json"))


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, ExitCode.SIGINT),
                                       (signal.SIGTERM, ExitCode.SIGTERM),
                                       (signal.SIGHUP, ExitCode.SIGHUP)],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_mid_window_writes_the_partial_report(procs, tmp_path, sig, code):
    pid = start_service(procs)
    proc, out, stderr_path = start_diagnose(procs, tmp_path, pid, "-d", 10)
    # 3 s in: py-spy's first sample comes after its attach and a random gap, which a loaded
    # machine stretched past 1 s ("before py-spy took any sample: no report written")
    wait_for(stderr_path, "sampled 30%", proc)
    os.killpg(proc.pid, sig)  # the whole group, as a terminal or `timeout` does
    stderr = finish(proc, tmp_path)
    assert proc.returncode == code, stderr
    name = signal.Signals(sig).name
    assert f"interrupted by {name} after" in stderr and "partial report written" in stderr
    assert "target exited" not in stderr
    report = report_of(out)
    assert report.sampling.partial is True
    assert report.sampling.thread_samples > 0
    assert report.sampling.duration_s < 8
    assert any(f"cut short by {name}" in note for note in report.sampling.notes)
    assert_no_temporary_files(out)
    assert_left_running(pid)


def test_second_ctrl_c_aborts_at_once(procs, tmp_path):
    pid = start_service(procs)
    proc, out, stderr_path = start_diagnose(procs, tmp_path, pid, "-d", 10)
    wait_for(stderr_path, "sampled 10%", proc)
    analyst = analyst_of(proc)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    stderr = finish(proc, tmp_path)
    assert proc.returncode == ExitCode.SIGINT, stderr
    assert "aborted by a second SIGINT" in stderr
    assert not list(out.glob("diagnose-*.html"))
    assert_no_temporary_files(out)
    assert_left_running(pid)
    assert_gone(analyst)


def analyst_of(proc: subprocess.Popen) -> psutil.Process:
    """The analysis process (cli/analyst.py) of a running attach."""
    found = [p for p in psutil.Process(proc.pid).children()
             if any("diagnose.cli.analyst" in part for part in p.cmdline())]
    assert len(found) == 1, [p.cmdline() for p in psutil.Process(proc.pid).children()]
    return found[0]


def assert_gone(process: psutil.Process, timeout: float = 5.0) -> None:
    """`process` exited (and was reaped, or is a zombie waiting for init) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not process.is_running() or process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"the analysis process {process.pid} outlived the attach")


def test_the_analysis_process_imports_in_the_window_at_the_services_priority_and_ends_with_the_attach(
        procs, tmp_path):
    pid = start_service(procs)
    proc, out, stderr_path = start_diagnose(procs, tmp_path, pid, "-d", 3)
    wait_for(stderr_path, "sampled 10%", proc)
    analyst = analyst_of(proc)
    # Not diagnose's raised priority (-20) inside the window: the service's equal there, at the
    # niceness diagnose started with (this test's).
    assert os.sched_getscheduler(analyst.pid) == os.SCHED_OTHER
    assert os.getpriority(os.PRIO_PROCESS, analyst.pid) == os.getpriority(os.PRIO_PROCESS, 0)
    stderr = finish(proc, tmp_path)
    assert proc.returncode == 0, stderr
    assert report_of(out).verdict is not None
    assert_gone(analyst)


def test_the_analysis_process_dies_with_a_killed_attach(procs, tmp_path):
    pid = start_service(procs)
    proc, _, stderr_path = start_diagnose(procs, tmp_path, pid, "-d", 10)
    wait_for(stderr_path, "sampled 10%", proc)
    analyst = analyst_of(proc)
    proc.kill()  # no handler runs: the kernel's parent-death signal is all that is left
    proc.wait(timeout=10)
    assert_gone(analyst)


def test_signal_before_sampling_starts_leaves_nothing(procs, tmp_path):
    pid = start_service(procs)
    proc, out, stderr_path = start_diagnose(procs, tmp_path, pid, "-d", 10)
    wait_for(stderr_path, "Sampling pid", proc)  # printed before the probes
    os.killpg(proc.pid, signal.SIGTERM)
    stderr = finish(proc, tmp_path)
    assert proc.returncode == ExitCode.SIGTERM, stderr
    assert "interrupted by SIGTERM" in stderr
    assert_no_temporary_files(out)
    assert_left_running(pid)


def diagnose_with_recorders(procs, tmp_path: Path, pid: int, seconds: float):
    """diagnose attached to `pid` for `seconds`, once its window is under way: its process, its
    output directory and its py-spy recorders."""
    proc, out, stderr_path = start_diagnose(procs, tmp_path, pid, "-d", seconds)
    wait_for(stderr_path, "sampled 10%", proc)
    recorders = [p for p in psutil.Process(proc.pid).children(recursive=True)
                 if "record" in p.cmdline()]
    assert recorders
    return proc, out, recorders


def test_pyspy_killed_mid_window(procs, tmp_path):
    pid = start_service(procs)
    proc, out, recorders = diagnose_with_recorders(procs, tmp_path, pid, 10)
    for recorder in recorders:
        recorder.kill()
    stderr = finish(proc, tmp_path)
    assert proc.returncode == ExitCode.PROFILER_FAILED, stderr
    killed = re.search(r"error: py-spy was killed by SIGKILL \(pids? ([\d, ]+)\) ([\d.]+) s into "
                       r"the 10 s window: no profile was written", stderr)
    assert killed, stderr
    assert {int(p) for p in killed.group(1).split(", ")} == {r.pid for r in recorders}
    assert float(killed.group(2)) < 8  # the window ended with its recorders
    assert not list(out.glob("diagnose-*.html"))
    assert_no_temporary_files(out)
    assert_left_running(pid)


def test_a_pyspy_that_falls_behind_is_stopped_at_the_windows_end_not_after_its_count(procs,
                                                                                    tmp_path):
    # py-spy stops after duration x rate samples; one starved of CPU (here: stopped for 4 s)
    # would run the window on for as long as it was held back.
    pid = start_service(procs)
    proc, out, recorders = diagnose_with_recorders(procs, tmp_path, pid, 3)
    for recorder in recorders:
        recorder.suspend()
    time.sleep(4)
    for recorder in recorders:
        recorder.resume()
    stderr = finish(proc, tmp_path)
    assert proc.returncode == 0, stderr
    report = report_of(out)
    # closed at the asked end, by the clock (the stop waits for the recorders' resumption), not
    # 3 + 4 s after its start by py-spy's count; the lag is named
    assert report.sampling.duration_s <= 3.0, report.sampling
    assert any("py-spy fell behind" in note and "s (starved of CPU)" in note
               for note in report.sampling.notes), report.sampling.notes
    assert_no_temporary_files(out)
    assert_left_running(pid)


def test_pyspy_missing(procs, tmp_path):
    """An interpreter with diagnose importable but no py-spy beside it nor on PATH."""
    if shutil.which("py-spy", path="/usr/bin:/bin"):
        pytest.skip("py-spy is installed system-wide")
    bare = tmp_path / "venv"
    venv.create(bare, with_pip=False, symlinks=True)
    env = dict(os.environ, PATH="/usr/bin:/bin",
               PYTHONPATH=os.pathsep.join([sysconfig.get_path("purelib"), str(REPO)]))
    pid = start_service(procs)
    proc, out, _ = start_diagnose(procs, tmp_path, pid, "-d", 2, env=env,
                                  python=str(bare / "bin" / "python"))
    stderr = finish(proc, tmp_path)
    assert proc.returncode == ExitCode.PROFILER_FAILED, stderr
    assert "py-spy is not installed" in stderr
    assert not out.exists() or not any(out.iterdir())
    assert_left_running(pid)


def test_target_stopped_by_its_owner_stays_stopped(procs, tmp_path):
    pid = start_service(procs)
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while set(thread_states(pid)) != {"T"}:
        assert time.monotonic() < deadline, thread_states(pid)
        time.sleep(0.02)
    started = time.monotonic()
    proc, out, _ = start_diagnose(procs, tmp_path, pid, "-d", 5)
    stderr = finish(proc, tmp_path)
    assert time.monotonic() - started < 20  # a clear error, not a hang
    assert proc.returncode == ExitCode.NO_SAMPLES, stderr
    assert f"process {pid}" in stderr and "is stopped (state T" in stderr
    assert f"kill -CONT {pid}" in stderr
    assert set(thread_states(pid)) == {"T"}  # its owner stopped it: it stays stopped
    assert not pyspy_against(pid)
    assert_no_temporary_files(out)


def test_target_exiting_mid_window(procs, tmp_path):
    pid = start_service(procs)
    proc, out, stderr_path = start_diagnose(procs, tmp_path, pid, "-d", 10)
    wait_for(stderr_path, "sampled 20%", proc)
    os.kill(pid, signal.SIGUSR1)  # the service exits by itself
    stderr = finish(proc, tmp_path)
    assert proc.returncode == ExitCode.TARGET_EXITED, stderr
    assert "the target exited during sampling" in stderr
    report = report_of(out)
    assert report.sampling.partial is True and report.sampling.thread_samples > 0
    assert any("the target exited" in note for note in report.sampling.notes)
    assert_no_temporary_files(out)
    assert not pyspy_against(pid)


def test_zombie_pid(procs, tmp_path):
    code = ("import os, time\n"
            "child = os.fork()\n"
            "if child == 0:\n    os._exit(0)\n"
            "print(child, flush=True)\n"
            "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    procs.append(parent)
    zombie = int(parent.stdout.readline())
    deadline = time.monotonic() + 5
    while thread_states(zombie) != "Z":
        assert time.monotonic() < deadline, thread_states(zombie)
        time.sleep(0.02)
    proc, out, _ = start_diagnose(procs, tmp_path, zombie, "-d", 2)
    stderr = finish(proc, tmp_path)
    assert proc.returncode == ExitCode.NO_SUCH_PROCESS, stderr
    assert f"process {zombie} is a zombie" in stderr and f"its parent {parent.pid}" in stderr
    assert not pyspy_against(zombie)
    assert not out.exists() or not any(out.iterdir())


def test_launcher_pid_names_its_python_children(procs, tmp_path):
    launcher = start_service(procs, launcher=True)
    children = [c.pid for c in psutil.Process(launcher).children()
                if "python" in c.name().lower()]
    assert len(children) == 1
    proc, out, _ = start_diagnose(procs, tmp_path, launcher, "-d", 2, "--no-children")
    stderr = finish(proc, tmp_path)
    assert proc.returncode == ExitCode.NOT_PYTHON, stderr
    assert f"process {launcher} (bash) is not a Python process" in stderr
    assert f"{children[0]} (python" in stderr
    assert_left_running(children[0])
    assert_left_running(launcher)
    assert not out.exists() or not any(out.iterdir())


def test_a_process_left_stopped_is_resumed_and_an_owner_stopped_one_is_not(procs):
    """The /proc check run after every capture, on its own: a process found stopped that ran
    before is resumed; one stopped before stays stopped."""
    ran, held = start_service(procs), start_service(procs)
    os.kill(held, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while set(thread_states(held)) != {"T"}:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    before = target_state.snapshot([ran, held])
    os.kill(ran, signal.SIGSTOP)  # what a recorder killed mid-ptrace could leave behind
    while set(thread_states(ran)) != {"T"}:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    messages = target_state.restore(before, [ran, held])
    assert len(messages) == 1 and f"process {ran}" in messages[0] and "resumed" in messages[0]
    assert_left_running(ran)
    assert set(thread_states(held)) == {"T"}
