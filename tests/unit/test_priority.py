"""diagnose raises its own scheduling priority while it attaches (where permitted) and puts its
py-spy recorders back to the priority it started with, so sampling disturbs the service as before."""

from __future__ import annotations

import os
import subprocess
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


@pytest.mark.skipif(os.geteuid() != 0, reason="raising a priority needs root or CAP_SYS_NICE")
def test_attach_runs_at_a_raised_priority_and_its_recorders_at_the_one_it_started_with():
    proc = subprocess.run(["nice", "-n", "3", sys.executable, "-c", SCRIPT], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    own, recorder = proc.stdout.split()
    assert int(own) == -20
    assert int(recorder) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)


def test_without_the_privilege_the_priority_stays_as_it_was():
    script = ("import os\nfrom diagnose.collect import priority\n"
              "os.setpriority = lambda *a: (_ for _ in ()).throw(PermissionError(1, 'EPERM'))\n"
              "priority.raise_own()\nprint(os.getpriority(os.PRIO_PROCESS, 0))")
    proc = subprocess.run(["nice", "-n", "2", sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 2)



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
