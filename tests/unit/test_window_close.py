"""A window py-spy overruns is closed a quarter past its asked end, and the note says what that
cost by which recorders were late."""

from __future__ import annotations

from pathlib import Path

from diagnose.collect.attach import _late_note, _Recording, window_close_s


def test_the_window_closes_a_quarter_past_its_end_and_never_under_a_second_past():
    assert window_close_s(8) == 10
    assert window_close_s(2) == 3  # py-spy's own start-up needs about a second


def test_a_late_native_calibration_leaves_the_python_samples_whole():
    note = _late_note([_Recording(41, Path("a"), True, 3)], 10.4, 8, 179)
    assert "native calibration of pid 41" in note and "Python samples are complete" in note
    assert "8 s window" in note and "10.4 s" in note


def test_a_late_main_recorder_says_its_samples_are_fewer():
    late = [_Recording(41, Path("a"), False, 7), _Recording(42, Path("b"), True, 3),
            _Recording(43, Path("c"), False, 7)]
    note = _late_note(late, 12.9, 8, 150)
    assert "pid 41, 43" in note and "the 150 samples it took" in note


def test_a_low_rate_recorder_gets_two_of_its_intervals_to_take_its_first_sample():
    # an idle master at 1 Hz, in a 3 s window: cut at 4 s it could have no sample at all
    assert window_close_s(3, rate_hz=1) == 5
    assert window_close_s(3, rate_hz=100) == 4
