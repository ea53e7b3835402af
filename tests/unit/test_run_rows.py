"""Consecutive identical samples of a thread are one row of the sample table with a count
(model/runs.py), and what reads instants (wait sites and their holders, the timeline) reads
the same from those rows as from one row per sample."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from diagnose.classify.categories import Categorizer
from diagnose.model.analysis import Analysis, analysis_of, analyze_profile, classify_profile
from diagnose.samples.profile import Frame, Profile, ThreadTrack
from diagnose.model.runs import bins_of_rows, instant_ticks, instants, thread_steps
from diagnose.model.waits import wait_sites
from diagnose.readers.loaders import load_profile
from diagnose.render.page_tables import timeline
from tests.conftest import RECORDED


def _profile(tracks: list[ThreadTrack]) -> Profile:
    profile = Profile(source="test")
    a = profile.intern_frame(Frame("serve", "app.py", 10, False))
    b = profile.intern_frame(Frame("work", "app.py", 20, False))
    profile.intern_stack((a,))
    profile.intern_stack((a, b))
    profile.threads.extend(tracks)
    return profile


def _analysis(profile: Profile) -> Analysis:
    return analysis_of(profile, classify_profile(profile, Categorizer()))


def _track(ids: list[int], **kwargs) -> ThreadTrack:
    return ThreadTrack(1, "t", np.array(ids, dtype=np.int32), np.full(len(ids), 0.01), **kwargs)


def test_consecutive_identical_samples_of_a_thread_are_one_row_with_their_count() -> None:
    samples = _analysis(_profile([_track([0, 0, 0, 1, 1, 0])])).samples
    assert samples.loc[:, "stack"].tolist() == [0, 1, 0]
    assert samples.loc[:, "count"].tolist() == [3, 2, 1]
    assert samples.loc[:, "t"].to_numpy() == pytest.approx([0.0, 0.03, 0.05])


@pytest.mark.parametrize("kwargs", [
    {"counts": np.ones(4, dtype=np.int64), "timed": False},  # collapsed input: no order
    {"times": np.array([0.0, 0.01, 0.03, 0.04])},  # measured instants, unevenly spaced
])
def test_samples_with_counts_or_timestamps_stay_one_row_each(kwargs: dict) -> None:
    samples = _analysis(_profile([_track([1, 1, 1, 1], **kwargs)])).samples
    assert len(samples) == 4


def _columns(samples) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sample table's thread, instant and count columns, as the instant helpers take them."""
    thread, t, count = (samples[column].to_numpy() for column in ("thread", "t", "count"))
    return thread, t, count


def test_uneven_weights_keep_one_row_per_sample() -> None:
    track = ThreadTrack(1, "t", np.array([1, 1, 1], dtype=np.int32), np.array([0.01, 0.02, 0.01]))
    assert len(_analysis(_profile([track])).samples) == 3


def test_rows_expand_into_the_instants_of_their_samples() -> None:
    profile = _profile([_track([0, 0, 1, 1, 1, 0]), _track([1, 0, 0, 0, 0, 1])])
    samples = _analysis(profile).samples
    found = instants(np.arange(len(samples)), *_columns(samples), thread_steps(profile))
    assert found.t == pytest.approx(np.tile(np.arange(6) * 0.01, 2))
    assert samples.loc[:, "stack"].to_numpy()[found.row].tolist() == [0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0, 1]


def _one_row_per_sample(profile: Profile) -> Profile:
    """The same samples with each one's instant given as a timestamp: never merged."""
    tracks = [dataclasses.replace(t, times=np.cumsum(t.weights) - t.weights) for t in profile.threads]
    return dataclasses.replace(profile, threads=tracks)


RECORDINGS = ["lock_contention", "preprocess_bound", "scheduler_overhead", "underloaded", "compute_bound"]


def _both(name: str) -> tuple[Analysis, Analysis]:
    """A recording analysed with its native samples (which find holders), from run rows and
    from one row per sample."""
    profile = load_profile(RECORDED / f"{name}.speedscope.json")
    native = RECORDED / f"{name}.native.speedscope.json"
    return (analyze_profile(profile, Categorizer(), native_profile=load_profile(native)),
            analyze_profile(_one_row_per_sample(profile), Categorizer(), native_profile=load_profile(native)))


@pytest.mark.parametrize("name", RECORDINGS)
def test_wait_sites_and_holders_read_the_same_from_runs_as_from_samples(name: str) -> None:
    runs, each = _both(name)
    assert len(runs.samples) < len(each.samples)  # the recording has runs
    assert wait_sites(runs) == wait_sites(each)


def test_holders_are_found_through_run_rows() -> None:
    sites = wait_sites(_both("lock_contention")[0])
    assert [(s.kind, s.max_concurrent) for s in sites] == [("lock", 6), ("gil", 3)]
    assert all(s.holders for s in sites)


@pytest.mark.parametrize("name", RECORDINGS)
def test_timeline_reads_the_same_from_runs_as_from_samples(name: str) -> None:
    runs, each = _both(name)
    assert timeline(runs) == timeline(each)


def test_a_py_spy_profiles_one_repeated_weight_is_held_once() -> None:
    profile = load_profile(RECORDED / "lock_contention.speedscope.json")
    track = max(profile.threads, key=lambda t: len(t.weights))
    assert len(track.weights) > 1 and track.weights.strides == (0,)
    assert float(track.weights[-1]) == float(track.weights[0])


@pytest.mark.parametrize("width", [0.004, 0.01, 0.025])  # the runs' step is 0.01
def test_timeline_bins_of_runs_are_the_bins_of_their_instants(width: float) -> None:
    profile = _profile([_track([0, 0, 0, 1, 1, 0, 1, 1, 1, 1]), _track([1, 1, 0, 0, 0, 0, 0, 1, 0, 0])])
    samples = _analysis(profile).samples
    thread, t, count = _columns(samples)
    steps = thread_steps(profile)
    row, found = bins_of_rows(thread, t, count, steps, width, 40)
    each = instants(np.arange(len(samples)), thread, t, count, steps)
    expected = np.minimum(np.floor(each.t / width + 1e-6).astype(np.int64), 39)
    # every bin an instant of the row falls in, and no other (a run may meet a bin twice)
    assert sorted(set(zip(row.tolist(), found.tolist()))) == sorted(set(zip(each.row.tolist(), expected.tolist())))


@pytest.mark.parametrize("interval", [0.01, 0.007, 0.02, 0.005])  # 0.02: instants half-way between ticks
def test_instant_ticks_are_the_rounded_ticks_of_the_rows_instants(interval: float) -> None:
    profile = _profile([_track([0, 0, 0, 1, 1, 0, 1, 1, 1, 1]), _track([1, 1, 0, 0, 0, 0, 0, 1, 0, 0])])
    samples = _analysis(profile).samples
    thread, t, count = _columns(samples)
    steps = thread_steps(profile)
    rows = np.array([4, 0, 2, 5])  # a subset, out of order: expanded in the order given
    each = instants(rows, thread, t, count, steps)
    found = instant_ticks(rows, thread, t, count, steps, interval)
    assert found.row.tolist() == each.row.tolist() == np.repeat(rows, found.per_row).tolist()
    assert found.tick.tolist() == np.round(each.t / interval).astype(np.int64).tolist()
