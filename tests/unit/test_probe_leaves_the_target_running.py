"""The probe that proves a target readable does not pause it: pausing a process whose threads
queue for the cores waits for each to be scheduled to stop (seconds beside 64 busy threads on
2 cores, the service stopped meanwhile). Only a native probe pauses it, as unwinding needs."""

from __future__ import annotations

import subprocess

import pytest

from diagnose.collect import pyspy

DUMP = "Process 42: python app.py\nPython v3.11.7 (/usr/bin/python3.11)\n"


@pytest.fixture
def commands(monkeypatch) -> list[list[str]]:
    ran: list[list[str]] = []

    def run(cmd, **_kwargs):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, DUMP, "")

    monkeypatch.setattr(pyspy.subprocess, "run", run)
    return ran


def test_a_plain_probe_reads_the_target_without_pausing_it(commands):
    result = pyspy.probe(42)
    assert result.ok and result.python_version == "3.11.7"
    assert "--nonblocking" in commands[0] and "--native" not in commands[0]


def test_a_native_probe_pauses_the_target_to_unwind_it(commands):
    assert pyspy.probe(42, native=True).ok
    assert "--native" in commands[0] and "--nonblocking" not in commands[0]
