"""A stop signal while the load generator runs stops it at once: the sweep's and experiment's
handlers raise Stopped in the main thread, and `load` aborts its run on the way out. The
"server" is a listening socket that never answers: one idle connection, no load."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import threading
import time

import psutil
import pytest

from diagnose.load.loadgen import load
from diagnose.load.loadtest import StopOnSignal, Stopped


@pytest.fixture
def silent_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


def test_the_handler_raises_stopped_and_is_removed_afterwards():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Stopped) as stopped:
        with StopOnSignal():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert stopped.value.name == "SIGTERM"
    assert stopped.value.error("x").exit_code == 143
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.fixture
def interruptible():
    """SIGINT as a terminal's job gets it: a suite started in the background of a script (`cmd
    &`) inherits SIGINT ignored, and StopOnSignal keeps an ignored signal ignored (as attach
    does: nohup's choice stands), so the Ctrl-C below would be lost for how the suite was
    launched."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("tool", ["python", "wrk"])
def test_a_signal_while_waiting_for_the_generator_stops_it(silent_port, tool, interruptible):
    if tool == "wrk" and shutil.which("wrk") is None:
        pytest.skip("wrk is not on PATH")
    children_before = {p.pid for p in psutil.Process().children()}
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    started = time.monotonic()
    with pytest.raises(Stopped):
        with StopOnSignal():
            timer.start()
            with load(f"http://127.0.0.1:{silent_port}/", seconds=30, connections=1,
                      threads=1, tool=tool, request_timeout_s=1):
                pass  # leaving the block waits for the 30 s run: the signal cuts it short
    # cut short: the run asked 30 s; the bound tells "stopped by the signal" from "ran its
    # course", many times the noise of a loaded machine's start-up
    assert time.monotonic() - started < 15
    new = [p for p in psutil.Process().children() if p.pid not in children_before]
    assert [p for p in new if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert not any(t.name.startswith("load-client-") and t.is_alive()
                   for t in threading.enumerate())
