"""A thread parked in `Event.wait(timeout)` or `Thread.join()` all window is no request thread,
even where each timed wake-up queues for the GIL behind busy threads: that GIL wait is taken
inside the parking call (`Condition.wait` under `Event.wait`), not by work of its own. A thread
whose GIL waits are in its own code still is a request thread.

Replayed from fixtures/recorded/lock_contention_fixed (the lock-contention workload with one
model per thread, six threads on 2 cores): its main thread, looping on `Event.wait(0.5)`, spent
12% of its samples on the GIL and was counted among the request threads, so `diagnose diff`
read a 12.5% lock share left "after the fix" (a CI failure of
tests/integration/test_diff_fix.py)."""

from __future__ import annotations

from diagnose.classify.categories import Categorizer
from diagnose.model.analysis import analyze_profile
from diagnose.samples.profile import Frame
from diagnose.vocab import ThreadRole, ThreadState
from tests.replay import replay_service
from tests.synthetic_profiles import profile_of

THREADING = "/usr/lib/python3.11/threading.py"
BOOT = [Frame("Thread._bootstrap", THREADING, 1002, False),
        Frame("Thread._bootstrap_inner", THREADING, 1045, False),
        Frame("Thread.run", THREADING, 982, False)]
MAIN = [Frame("<module>", "/srv/app.py", 90, False), Frame("serve", "/srv/app.py", 80, False)]
EVENT_WAIT = [Frame("Event.wait", THREADING, 629, False), Frame("Condition.wait", THREADING, 331, False)]
JOIN = [Frame("Thread.join", THREADING, 1119, False),
        Frame("Thread._wait_for_tstate_lock", THREADING, 1139, False)]
FUTEX = [Frame("PyThread_acquire_lock_timed", "/usr/lib/libpython3.11.so.1.0", 0, True),
         Frame("do_futex_wait", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0, True)]
TAKE_GIL = [Frame("take_gil", "/usr/lib/libpython3.11.so.1.0", 0, True)]
WORK = [Frame("handle", "/srv/app.py", 10, False), Frame("tokenize", "/srv/app.py", 20, False)]


def _roles(stacks_by_thread: dict[str, list[list[Frame]]]) -> dict[str, str]:
    analysis = analyze_profile(profile_of(stacks_by_thread), Categorizer())
    return dict(zip(analysis.threads.loc[:, "name"], analysis.threads.loc[:, "role"]))


def _busy(samples: int) -> list[list[Frame]]:
    return [BOOT + WORK] * (samples // 2) + [BOOT + WORK + TAKE_GIL] * (samples - samples // 2)


def test_an_event_wait_loop_queueing_for_the_gil_at_each_wake_up_is_not_a_request_thread():
    roles = _roles({"MainThread": [MAIN + EVENT_WAIT + FUTEX] * 85 + [MAIN + EVENT_WAIT + TAKE_GIL] * 15,
                    "request-0": _busy(100), "request-1": _busy(100)})
    assert roles["MainThread"] == ThreadRole.OTHER
    assert roles["request-0"] == roles["request-1"] == ThreadRole.REQUEST


def test_a_join_re_taking_the_gil_as_it_returns_is_parked_too():
    roles = _roles({"MainThread": [MAIN + JOIN + FUTEX] * 80 + [MAIN + JOIN + TAKE_GIL] * 20,
                    "request-0": _busy(100)})
    assert roles["MainThread"] == ThreadRole.OTHER


def test_a_thread_waiting_on_an_event_between_gil_bound_work_stays_a_request_thread():
    # the same share of event waits as the main thread above, but its GIL waits are in its own
    # code: it has work to do between the waits
    roles = _roles({"handler": [BOOT + WORK + EVENT_WAIT + FUTEX] * 85 + [BOOT + WORK + TAKE_GIL] * 15,
                    "request-0": _busy(100)})
    assert roles["handler"] == ThreadRole.REQUEST


def test_the_recorded_fixed_service_counts_only_its_six_model_threads_as_request_threads(tmp_path):
    service = replay_service("lock_contention_fixed", "six_models_parked_main", tmp_path)
    analysis = service.processes[0].analysis
    threads = analysis.threads
    main = threads[threads["name"] == "MainThread"].iloc[0]
    assert main[ThreadState.GIL] > 0.1 * main["samples"]  # it did queue for the GIL at wake-ups
    assert main["role"] == ThreadRole.OTHER
    request = analysis.request_threads
    assert sorted(request["name"]) == [f"request-{i}" for i in range(6)]
    # after the fix no request thread waits on a lock: what the diff compares
    assert request[ThreadState.LOCK].sum() == 0
