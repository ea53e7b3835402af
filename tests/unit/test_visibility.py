"""A recording made by py-spy at its defaults (no --idle) is recognised even where some waits still
show: its threads' sample counts spread below the largest, where --idle reads every thread that
lives through the window at every instant. Recorded fixtures: fixtures/record.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diagnose.samples.profile import Profile, ThreadTrack
from diagnose.readers.visibility import assess_waits
from tests.conftest import invoke_cli_report

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "recorded"


def test_a_lock_queue_recorded_without_idle_is_inconclusive_and_says_how_to_record(tmp_path):
    # py-spy's defaults on request threads queueing on a model lock: lock waits still show
    # (59-72% in two recordings) but the counts spread from 56 to 200.
    proc, report = invoke_cli_report("analyze", RECORDED / "locked_blas.noidle.speedscope.json",
                                     "--json", "--output-dir", tmp_path)
    assert proc.returncode == 0 and report is not None, proc.stderr
    verdict = report.verdict
    assert verdict.primary == "inconclusive", verdict
    assert "cannot show waits" in verdict.headline and "py-spy record --idle" in verdict.headline
    assert "spread from" in verdict.headline


@pytest.mark.parametrize("name", ["lock_contention", "underloaded", "preprocess_bound",
                                  "compute_bound", "scheduler_overhead"])
def test_recordings_made_with_idle_keep_their_verdict(name, tmp_path):
    proc, report = invoke_cli_report("analyze", RECORDED / f"{name}.speedscope.json", "--json",
                                     "--output-dir", tmp_path)
    assert proc.returncode == 0 and report is not None, proc.stderr
    assert report.verdict.primary != "inconclusive", report.verdict


def _profile(counts: list[int], first_waits: bool = True) -> Profile:
    """Threads of one process; the first waits (an idle pool worker's Condition.wait) at every
    sample unless told otherwise, the others run."""
    from diagnose.samples.profile import Frame

    frames = [Frame("work", "/srv/app.py", 1, False),
              Frame("Thread.run", "/usr/lib/python3.11/threading.py", 982, False),
              Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 320, False)]
    threads = [ThreadTrack(tid=100 + i, name=f"t{i}",
                           stack_ids=np.full(n, 1 if i == 0 and first_waits else 0, dtype=np.int32),
                           weights=np.full(n, 0.01), counts=np.ones(n, dtype=np.int64))
               for i, n in enumerate(counts)]
    return Profile(frames=frames, stacks=[(0,), (1, 2)], threads=threads, interval_s=0.01)


def test_a_pool_sharing_the_largest_count_shows_its_waits():
    profile = _profile([500, 500, 499, 500, 120])
    assess_waits(profile)
    assert profile.waits_visible


def test_short_lived_threads_far_below_the_largest_count_are_no_sign_of_dropped_samples():
    profile = _profile([500, 40, 12, 30, 25, 8])  # a thread per request beside the main thread
    assess_waits(profile)
    assert profile.waits_visible


def test_counts_spread_below_a_single_largest_say_running_threads_only_though_one_waits():
    profile = _profile([200, 164, 177, 152, 142, 56])
    assess_waits(profile)
    assert not profile.waits_visible and "spread from 56 to 200" in profile.waits_reason


def test_running_threads_within_a_tenth_of_each_other_are_still_a_recording_without_idle():
    # Six busy threads of a lock-bound service recorded without --idle: two share the largest
    # count (so no spread below one top), the rest sit within 10% of it, and none waits.
    profile = _profile([100, 100, 95, 92, 97, 91], first_waits=False)
    assess_waits(profile)
    assert not profile.waits_visible and "differ (91 to 100)" in profile.waits_reason


def test_busy_threads_read_at_every_instant_keep_their_waits_visible():
    # The same service's busy threads with --idle: read at every instant, one read missed.
    profile = _profile([400, 400, 399, 400, 400, 400], first_waits=False)
    assess_waits(profile)
    assert profile.waits_visible
