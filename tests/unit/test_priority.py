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
from diagnose.collect.attach import _start_recorder
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
    assert int(own) == -10
    assert int(recorder) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 3)


def test_without_the_privilege_the_priority_stays_as_it_was():
    script = ("import os\nfrom diagnose.collect import priority\n"
              "os.setpriority = lambda *a: (_ for _ in ()).throw(PermissionError(1, 'EPERM'))\n"
              "priority.raise_own()\nprint(os.getpriority(os.PRIO_PROCESS, 0))")
    proc = subprocess.run(["nice", "-n", "2", sys.executable, "-c", script], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 2)


WARM_UP_SCRIPT = """
import os, sys, threading
sys.path.insert(0, sys.argv[1])
from diagnose.collect import priority
from diagnose.report.warm_up import AnalysisWarmUp
if sys.argv[2] == "raised":
    priority.raise_own()
import gate
warm_up = AnalysisWarmUp(modules=("slow_to_import",))
warm_up.start()
gate.entered.wait(30)  # the window: the thread is importing
gate.release.set()
warm_up.ready()
import slow_to_import  # already made by the thread
print(slow_to_import.nice_while_importing, os.getpriority(os.PRIO_PROCESS, 0),
      slow_to_import.imported_in)
"""

SLOW_MODULE = """
import os, threading
import gate
nice_while_importing = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
imported_in = threading.current_thread().name
gate.entered.set()
gate.release.wait(30)
"""

GATE_MODULE = "import threading\nentered, release = threading.Event(), threading.Event()\n"


def warm_up_run(tmp_path, mode: str) -> list[str]:
    (tmp_path / "slow_to_import.py").write_text(SLOW_MODULE)
    (tmp_path / "gate.py").write_text(GATE_MODULE)
    proc = subprocess.run([sys.executable, "-c", WARM_UP_SCRIPT, str(tmp_path), mode],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.skipif(os.geteuid() != 0, reason="lifting a thread back needs root or CAP_SYS_NICE")
def test_the_analysis_is_imported_during_the_window_at_the_least_priority(tmp_path):
    nice_while_importing, own, imported_in = warm_up_run(tmp_path, "raised")
    assert imported_in == "diagnose-warm-up"
    assert int(nice_while_importing) == 19 and int(own) == -10


def test_without_the_privilege_to_lift_it_the_warm_up_keeps_diagnoses_priority(tmp_path):
    nice_while_importing, own, imported_in = warm_up_run(tmp_path, "plain")
    assert imported_in == "diagnose-warm-up"
    assert int(nice_while_importing) == int(own)  # not stranded at 19 behind the service
