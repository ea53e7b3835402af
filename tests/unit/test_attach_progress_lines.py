"""The attach's progress log says every tenth of the window once, in order, even when a tick comes
late: CI's loaded machine delayed one past 20% of a 3 s window, the log skipped "sampled 10%",
and a script waiting for it (tests/integration/test_faults_signals.py) never saw the window open."""

from diagnose.cli.attach import progress_lines


def test_a_late_tick_still_says_every_tenth_it_passed():
    assert progress_lines(0, 0.27, 5) == ["  sampled 10% of the window (5 threads)",
                                          "  sampled 20% of the window (5 threads)"]


def test_each_tenth_is_said_once():
    assert progress_lines(2, 0.29, 5) == []
    assert progress_lines(2, 0.31, 8) == ["  sampled 30% of the window (8 threads)"]
    assert progress_lines(9, 1.0, 5) == ["  sampled 100% of the window (5 threads)"]
