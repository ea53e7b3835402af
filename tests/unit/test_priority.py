"""diagnose raises its own scheduling priority while it attaches (where permitted) and puts its
py-spy recorders back to the priority it started with, so sampling disturbs the service as before."""

from __future__ import annotations

import os
import subprocess
import time
import sys

import pytest

SCRIPT = """
import os, subprocess
from diagnose.collect import priority
from diagnose.collect.capture import _start_recorder
priority.raise_own()
child = _start_recorder(["sh", "-c", "cut -d' ' -f19 /proc/$$/stat"])
out, _ = child.communicate(timeout=30)
print(os.getpriority(os.PRIO_PROCESS, 0), out.strip())
"""


def _niced_output(script: str, nice: int) -> list[str]:
    """What `script` printed, run `nice` steps below this process's priority."""
    proc = subprocess.run(["nice", "-n", str(nice), sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def _started_with(nice: int) -> int:
    """The niceness a process started `nice` steps below this one has."""
    return min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root or CAP_SYS_NICE")
def test_attach_runs_at_a_raised_priority_and_its_recorders_at_the_one_it_started_with():
    own, recorder = _niced_output(SCRIPT, 3)
    assert int(own) == -20
    assert int(recorder) == _started_with(3)


def test_without_the_privilege_the_priority_stays_as_it_was():
    script = ("import os\nfrom diagnose.collect import priority\n"
              "os.setpriority = lambda *a: (_ for _ in ()).throw(PermissionError(1, 'EPERM'))\n"
              "priority.raise_own()\nprint(os.getpriority(os.PRIO_PROCESS, 0))")
    (own,) = _niced_output(script, 2)
    assert int(own) == _started_with(2)



WINDOW_SCRIPT = """
import os, threading
from diagnose.collect import priority
priority.raise_own()
seen = {}
with priority.in_window():
    seen["window"] = os.getpriority(os.PRIO_PROCESS, 0)
    helper = threading.Thread(target=lambda: seen.update(
        helper=os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
    helper.start()
    helper.join()
print(seen["window"], seen["helper"], os.getpriority(os.PRIO_PROCESS, 0))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root or CAP_SYS_NICE")
def test_the_window_runs_a_step_below_the_imports_and_analysis_around_it():
    proc = subprocess.run([sys.executable, "-c", WINDOW_SCRIPT], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    window, helper, after = map(int, proc.stdout.split())
    assert (window, helper, after) == (-10, -10, -20)  # the sampler's threads inherit -10


OPENER_SCRIPT = """
import os, time
from diagnose.collect import priority
from diagnose.collect.capture import _SETPRIV, _start_recorder
assert _SETPRIV is not None
priority.raise_own()
child = _start_recorder(["sh", "-c", "cut -d' ' -f19 /proc/$$/stat >&2; "
                         "echo 'py-spy> Sampling process 5 times a second'; sleep 0.5; "
                         "cut -d' ' -f19 /proc/$$/stat >&2"], opener=True)
deadline = time.monotonic() + 30
while child.sampling_since is None and time.monotonic() < deadline:
    child.read_head()
    time.sleep(0.01)
_, err = child.communicate(timeout=30)
print(*err.split())
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root or CAP_SYS_NICE")
def test_a_recorder_the_clock_waits_for_starts_at_diagnoses_priority_and_samples_at_the_services():
    starting, sampling = _niced_output(OPENER_SCRIPT, 3)
    assert int(starting) == -20  # loading the target's symbols, ahead of the clock
    assert int(sampling) == _started_with(3)


ORPHAN_SCRIPT = """
import os, sys, time
from diagnose.collect.capture import _start_recorder
child = _start_recorder(["sh", "-c", "trap 'echo interrupted > {out}; exit 0' INT; "
                         "echo 'py-spy> Sampling process'; while :; do sleep 0.05; done"], opener={opener})
while child.sampling_since is None:
    child.read_head()
    time.sleep(0.01)
print(child.pid, flush=True)
os._exit(0)  # as if killed: no cleanup of ours runs
"""


@pytest.mark.parametrize("opener", [True, False])
def test_a_recorder_is_interrupted_when_diagnose_dies(tmp_path, opener):
    out = tmp_path / "said"
    proc = subprocess.run([sys.executable, "-c", ORPHAN_SCRIPT.format(out=out, opener=opener)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    pid = int(proc.stdout)
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        assert out.read_text().strip() == "interrupted"  # SIGINT: py-spy writes what it has
    finally:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
