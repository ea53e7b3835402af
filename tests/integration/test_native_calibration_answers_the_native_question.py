"""The default plan asks no native `py-spy dump` before the window: its main recorders take no
native frames, so one plain dump proves the target readable, and the native calibration's own
recorders, started with the window, prove native unwinding (a saturated 3-worker tree waited
0.4-0.6 s for the native dump before its window opened). Where py-spy cannot unwind the target,
the window is kept and the report says its states are estimated, in py-spy's words."""

from __future__ import annotations

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


def test_the_native_calibration_proves_native_unwinding_without_a_native_probe(tmp_path, monkeypatch):
    probes: list[bool] = []
    real_probe = pyspy.probe

    def counted_probe(pid: int, native: bool = False, timeout: float = 15.0) -> pyspy.ProbeResult:
        probes.append(native)
        return real_probe(pid, native, timeout)

    monkeypatch.setattr(pyspy, "probe", counted_probe)
    with running([sys.executable, "-c", SERVICE]) as pid:
        cap = capture(pid, tmp_path, AttachOptions(duration=2.0))
        try:
            assert probes == [False], probes
            assert cap.sampling.native is True
            assert "native calibration" in cap.sampling.mode, cap.sampling.mode
            assert cap.native_profile_path is not None and cap.native_profile_path.stat().st_size > 0
        finally:
            cap.cleanup()


def test_a_target_py_spy_cannot_unwind_natively_keeps_its_window_with_states_estimated(tmp_path, monkeypatch):
    real_command = pyspy.record_command

    def failing_native(pid, output, duration, rate, native, nonblocking=False, subprocesses=False,
                       fmt="chrometrace"):
        if native and fmt == "speedscope":  # the calibration recorder, as py-spy fails it
            return ["sh", "-c", "echo 'Error: Failed to load symbols' >&2; exit 1"]
        return real_command(pid, output, duration, rate, native, nonblocking, subprocesses, fmt)

    monkeypatch.setattr(pyspy, "record_command", failing_native)
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
