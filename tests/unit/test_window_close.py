"""The window is timed by the clock, not by py-spy's count: its clock starts when every recorder
says it samples, each recorder is told to stop a lead before the end that lets it exit about
then, and a recorder that lagged is named with its lag."""

from __future__ import annotations

import math

import sys
import time
from pathlib import Path

import pytest

from diagnose.collect.capture import (START_WAIT_S, _behind_s, _clock_start, _collect, _late_note,
                                     _Recording, _start_recorder, window_close_s)
from diagnose.collect.plan import (MAX_STOP_RAISE, STOP_LEAD_MAX_SHARE, STOP_MISS_LOG, STOP_SLACK_S,
                                   stop_lead_s, stoppable_rate)

# A stand-in for py-spy: prints its start-up line after `delay` seconds, then waits.
SAYS_IT_SAMPLES = ("import sys, time; time.sleep({delay}); "
                   "print('py-spy> Sampling process 20 times a second for 16 seconds.', flush=True);"
                   " time.sleep(30)")


@pytest.fixture
def stand_ins():
    started = []

    def start(delay: float):
        recorder = _start_recorder([sys.executable, "-c", SAYS_IT_SAMPLES.format(delay=delay)])
        started.append(recorder)
        return recorder

    yield start
    for recorder in started:
        recorder.kill()
        recorder.wait()
        for pipe in (recorder.stdout, recorder.stderr):
            if pipe is not None:
                pipe.close()


def _clock_of(recorders, launched: float, timeout: float = 10.0) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        start = _clock_start(recorders, launched, time.monotonic())
        if start is not None:
            return start
        time.sleep(0.02)
    raise AssertionError("the clock never started")


def test_the_clock_starts_when_the_last_recorder_says_it_samples(stand_ins):
    launched = time.monotonic()
    early, late = stand_ins(0.0), stand_ins(0.6)
    start = _clock_of([early, late], launched)
    assert early.sampling_since is not None and late.sampling_since is not None
    assert start == late.sampling_since > early.sampling_since
    assert start - launched >= 0.6  # the late one's start-up is not taken out of the window


def test_a_recorder_that_never_says_it_samples_does_not_hold_the_window_back(stand_ins):
    silent = stand_ins(60.0)
    launched = time.monotonic() - START_WAIT_S  # as if launched START_WAIT_S ago
    now = time.monotonic()
    assert _clock_start([silent], launched, now) == now
    assert silent.sampling_since is None


def test_what_a_recorder_said_before_the_clock_is_kept_in_its_output(stand_ins):
    recorder = stand_ins(0.0)
    _clock_of([recorder], time.monotonic())
    recorder.terminate()
    assert "Sampling process 20 times a second" in _collect(recorder)


def test_a_busy_recorder_is_stopped_at_the_end_and_a_slow_one_ahead_of_it():
    assert stop_lead_s(100, 6) < 0.02  # its next samples are milliseconds away
    assert stop_lead_s(40, 6) == pytest.approx(STOP_MISS_LOG / 40 - STOP_SLACK_S)
    assert stop_lead_s(8, 6) == pytest.approx(STOP_MISS_LOG / 8 - STOP_SLACK_S)
    # never more than a quarter of the window: a 1 Hz recorder keeps most of its span
    assert stop_lead_s(1, 6) == 1.5


def test_a_recorder_stops_early_enough_to_have_exited_by_the_end_ninety_nine_times_in_a_hundred():
    # py-spy's wait for the sample that ends it is ~Gamma(2, rate): P(wait > x / rate) = e^-x (1 + x)
    x = STOP_MISS_LOG
    assert math.exp(-x) * (1 + x) == pytest.approx(0.01, abs=0.0005)
    for rate in (3, 8, 20):
        assert stop_lead_s(rate, 10) + STOP_SLACK_S == pytest.approx(x / rate)


def _cut(rate: int, duration: float) -> bool:
    """The rate's stop lead is cut by the window's share (it could exit after the end)."""
    return STOP_MISS_LOG / rate - STOP_SLACK_S > STOP_LEAD_MAX_SHARE * duration


def test_a_recorder_stopped_early_samples_faster_to_keep_its_count():
    for rate, duration in ((2, 6), (3, 6), (7, 6), (10, 4), (1, 10), (8, 10), (4, 10)):
        raised = stoppable_rate(rate, duration)
        assert raised > rate
        assert raised * (duration - stop_lead_s(raised, duration)) >= 0.97 * rate * duration
        assert not _cut(raised, duration)
        below = raised - 1  # the least rate that does: it loses samples, or its lead is cut
        assert (below * (duration - stop_lead_s(below, duration)) < 0.97 * rate * duration
                or _cut(below, duration))
    assert stoppable_rate(100, 6) == 100  # stopped at the end: nothing to make up
    assert stoppable_rate(3, None) == 3  # no window known (a plan for analysis): as given


def test_a_slow_recorder_in_a_short_window_samples_fast_enough_that_its_lead_is_not_cut():
    # a 3 Hz recorder needs ~2.2 s: a 10 s window allows it; a 5 s one (1.25 s) does not
    assert not _cut(stoppable_rate(3, 10), 10) and stoppable_rate(3, 10) <= 4
    assert stoppable_rate(3, 5) > 3 and not _cut(stoppable_rate(3, 5), 5)
    # ...but never past MAX_STOP_RAISE times its rate: a 1 s window keeps its budget's cost
    assert stoppable_rate(2, 1) == MAX_STOP_RAISE * 2


def test_callers_sizing_around_the_window_get_start_up_and_exit_on_top():
    assert window_close_s(6) == 7.5
    assert window_close_s(20) == 25


def test_py_spys_own_lag_lines_are_read_in_every_unit():
    assert _behind_s("py-spy> 1.20s behind in sampling, results may be inaccurate") == 1.2
    assert _behind_s("950.00ms behind in sampling\n2.50s behind in sampling") == 2.5
    assert _behind_s("py-spy> Stopped sampling because Control-C pressed") is None


def test_a_lagging_native_calibration_leaves_the_python_samples_whole():
    note = _late_note([(_Recording(41, Path("a"), True, 3), 1.4)], 179)
    assert "native calibration of pid 41" in note and "Python samples are complete" in note
    assert "1.4 s" in note


def test_a_lagging_main_recorder_says_its_samples_are_fewer():
    behind = [(_Recording(41, Path("a"), False, 7), 1.1), (_Recording(42, Path("b"), True, 3), 2.0),
              (_Recording(43, Path("c"), False, 7), 3.2)]
    note = _late_note(behind, 150)
    assert "pid 41, 43" in note and "the 150 samples it took" in note and "3.2 s" in note
