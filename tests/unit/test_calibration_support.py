"""Calibration needs support: a Python stack takes the state mix of its native samples only when
at least MIN_SUPPORT of them stand behind it (or behind its innermost frames)."""

import numpy as np

from diagnose.classify.calibrate import MIN_SUPPORT, calibration_from
from diagnose.samples.profile import Frame, Profile, ThreadTrack

HANDLER = Frame("handle", "/srv/app.py", 10, False)
PREDICT = Frame("Model.predict", "/srv/app.py", 40, False)
ACQUIRE = Frame("PyThread_acquire_lock_timed", "/usr/lib/libpython3.11.so", 0, True)
FUTEX = Frame("__futex_abstimed_wait_common", "/usr/lib/libc.so.6", 0, True)


def _native_profile(stacks_and_counts):
    profile = Profile(native=True)
    ids = []
    for frames, count in stacks_and_counts:
        sid = profile.intern_stack(tuple(profile.intern_frame(f) for f in frames))
        ids += [sid] * count
    profile.threads.append(ThreadTrack(1, "worker", np.array(ids, dtype=np.int32),
                                       np.full(len(ids), 0.01)))
    return profile


def test_a_stack_seen_in_too_few_native_samples_keeps_the_frame_only_estimate():
    calibration = calibration_from(_native_profile([((HANDLER, PREDICT, ACQUIRE, FUTEX), MIN_SUPPORT - 1)]))
    key = (("handle", "/srv/app.py", 10), ("Model.predict", "/srv/app.py", 40))
    assert calibration.lookup(key) is None


def test_a_stack_with_enough_native_samples_gets_their_mix_and_its_support():
    calibration = calibration_from(_native_profile([((HANDLER, PREDICT, ACQUIRE, FUTEX), MIN_SUPPORT + 2)]))
    key = (("handle", "/srv/app.py", 10), ("Model.predict", "/srv/app.py", 40))
    mixture, support = calibration.lookup(key)
    assert support == MIN_SUPPORT + 2
    assert mixture[0][0].state == "lock"
    assert mixture[0][1] == 1.0


def test_a_rare_stack_borrows_the_mix_of_its_innermost_frames_when_they_are_well_supported():
    other_caller = Frame("batch_handle", "/srv/app.py", 20, False)
    calibration = calibration_from(_native_profile([
        ((HANDLER, PREDICT, ACQUIRE, FUTEX), MIN_SUPPORT),
        ((other_caller, HANDLER, PREDICT, ACQUIRE, FUTEX), 1)]))
    rare = (("batch_handle", "/srv/app.py", 20), ("handle", "/srv/app.py", 10),
            ("Model.predict", "/srv/app.py", 40))
    mixture, support = calibration.lookup(rare)
    assert support == MIN_SUPPORT + 1  # the innermost two frames were seen this often in all
    assert mixture[0][0].state == "lock"


def test_a_mix_borrowed_from_another_stacks_innermost_frames_puts_the_site_in_this_stack():
    """Two processes of one service (a front end and the backend it was sampled with) both wait
    in Event.wait -> Condition.wait, called from their own `main`. A Python-only stack of the
    front end, with no native samples of its own, borrows the backend's mix by those two frames:
    its wait site is its own caller at the same place, never the backend's `main` (a replay
    named the front end's main thread as waiting at feature_backend.py:112)."""
    from diagnose.classify.categories import Categorizer
    from diagnose.model.table import classify_stacks

    event_wait = Frame("Event.wait", "/usr/lib/python3.11/threading.py", 629, False)
    condition_wait = Frame("Condition.wait", "/usr/lib/python3.11/threading.py", 331, False)
    backend_main = Frame("main", "/srv/backend.py", 112, False)
    calibration = calibration_from(_native_profile([
        ((backend_main, event_wait, condition_wait, ACQUIRE, FUTEX), MIN_SUPPORT + 1)]))
    front_end = Profile(native=False)
    front_main = Frame("Harness.wait", "/srv/harness.py", 151, False)
    sid = front_end.intern_stack(tuple(front_end.intern_frame(f) for f in (
        Frame("<module>", "/srv/front.py", 133, False), front_main, event_wait, condition_wait)))
    front_end.threads.append(ThreadTrack(7, "MainThread", np.array([sid] * 5, dtype=np.int32),
                                         np.full(5, 0.01)))
    table = classify_stacks(front_end, Categorizer(), calibration)
    assert table.calibrated[sid]
    assert front_end.frames[table.site[sid]] == front_main
