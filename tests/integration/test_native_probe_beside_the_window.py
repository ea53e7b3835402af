"""The default plan's native question is asked beside the window, not before it: the main
recorders take no native frames, so the window opens after one plain `py-spy dump`, and the
native calibration recorders start once a native dump beside them says py-spy can unwind the
target (a saturated 3-worker tree waited 0.4-0.6 s for that dump before its window opened).
Where it cannot, the window is kept and the report says its states are estimated."""

from __future__ import annotations

import subprocess
import sys

import pytest

from diagnose.collect import pyspy
from diagnose.collect.capture import AttachOptions, capture
from tests.integration.conftest import requires_ptrace, running

pytestmark = [pytest.mark.integration, requires_ptrace]

SERVICE = r'''
import os, threading

def spin():
    while True:
        sum(range(1000))

for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
print(f"READY pid={os.getpid()}", flush=True)
threading.Event().wait()
'''


def test_the_native_calibration_starts_beside_the_window_once_the_probe_answers(tmp_path):
    with running([sys.executable, "-c", SERVICE]) as pid:
        cap = capture(pid, tmp_path, AttachOptions(duration=2.0))
        try:
            assert cap.sampling.native is True
            assert "native calibration" in cap.sampling.mode, cap.sampling.mode
            assert cap.native_profile_path is not None and cap.native_profile_path.stat().st_size > 0
        finally:
            cap.cleanup()


def test_a_target_py_spy_cannot_unwind_natively_keeps_its_window_with_states_estimated(tmp_path, monkeypatch):
    def failing_native_probe(pid: int, native: bool = False) -> subprocess.Popen[str]:
        if not native:
            return real_start(pid, native)
        return subprocess.Popen(["sh", "-c", "echo 'Error: Failed to load symbols' >&2; exit 1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    real_start = pyspy.start_probe
    monkeypatch.setattr(pyspy, "start_probe", failing_native_probe)
    with running([sys.executable, "-c", SERVICE]) as pid:
        cap = capture(pid, tmp_path, AttachOptions(duration=2.0))
        try:
            assert cap.sampling.native is False
            assert "native calibration" not in cap.sampling.mode, cap.sampling.mode
            assert "native stacks" not in cap.sampling.plan
            assert cap.native_profile_path is None
            assert any("native frames unavailable (Failed to load symbols)" in n for n in cap.notes), cap.notes
            assert cap.sampling.samples_taken
        finally:
            cap.cleanup()
