"""A library's own transport thread (multiprocessing's queue feeder, a pool's result handler) is
never a request thread (its role is "library"), however often it runs or waits for the GIL; a
request handler that merely puts on a multiprocessing queue still is one."""

from __future__ import annotations

from diagnose.classify.categories import Categorizer
from diagnose.model.analysis import analyze_profile
from diagnose.model.library_threads import library_stacks
from diagnose.samples.profile import Frame, Profile
from tests.synthetic_profiles import profile_of

BOOT = [Frame("Thread._bootstrap", "/usr/lib/python3.11/threading.py", 1002, False),
        Frame("Thread._bootstrap_inner", "/usr/lib/python3.11/threading.py", 1045, False),
        Frame("Thread.run", "/usr/lib/python3.11/threading.py", 982, False)]
FEED = Frame("Queue._feed", "/usr/lib/python3.11/multiprocessing/queues.py", 250, False)
PICKLE = Frame("ForkingPickler.dumps", "/usr/lib/python3.11/multiprocessing/reduction.py", 51, False)
TAKE_GIL = Frame("take_gil", "/usr/lib/libpython3.11.so.1.0", 0, True)
HANDLE = Frame("handle", "/srv/app.py", 10, False)
DECODE = Frame("decode_image", "/srv/app.py", 20, False)
PUT = Frame("Queue.put", "/usr/lib/python3.11/multiprocessing/queues.py", 94, False)


def _roles(profile: Profile) -> dict[str, str]:
    analysis = analyze_profile(profile, Categorizer())
    return dict(zip(analysis.threads.loc[:, "name"], analysis.threads.loc[:, "role"]))


def test_queue_feeder_waiting_for_the_gil_is_not_a_request_thread():
    profile = profile_of({
        "worker": [BOOT + [HANDLE, DECODE]] * 40,
        "feeder": [BOOT + [FEED, PICKLE, TAKE_GIL]] * 30 + [BOOT + [FEED]] * 10,
    })
    roles = _roles(profile)
    assert roles["worker"] == "request"
    assert roles["feeder"] == "library"


def test_handler_that_puts_on_a_multiprocessing_queue_stays_a_request_thread():
    profile = profile_of({"handler": [BOOT + [HANDLE, PUT, TAKE_GIL]] * 20 + [BOOT + [HANDLE, DECODE]] * 20})
    assert _roles(profile)["handler"] == "request"


def test_stacks_are_marked_only_under_a_library_loop():
    profile = profile_of({"feeder": [BOOT + [FEED, PICKLE]], "handler": [BOOT + [HANDLE, PUT]]})
    assert library_stacks(profile).tolist() == [True, False]
