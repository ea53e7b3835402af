"""A lock held across a call: lock_contention's first advice names the call the holder was in and
the `with` block to move it out of, from the holder's stack and the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from diagnose.checks import lock_contention
from diagnose.checks.engine import load_check_settings
from diagnose.model import held_locks
from diagnose.samples import source
from tests.unit.test_deadlock import LOCK_WAIT, THREAD_ROOT, analysis, native, py

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"
SETTINGS = load_check_settings()["lock_contention"]

SERVICE = '''\
import threading
import time

MODEL_LOCK = threading.Lock()


def worker(client):
    while True:
        handle(client, 1)  # mark: loop


def handle(client, req):
    with MODEL_LOCK:  # mark: acquire
        features = fetch_features(client, req)  # mark: held-call
        scores = score(features)  # mark: held-compute
    return postprocess(scores)  # mark: after-block


def handle_sleeping(client, req):
    with MODEL_LOCK:  # mark: sleep-acquire
        time.sleep(0.005)  # mark: sleep-call
        return req


def handle_manually(client, req):
    MODEL_LOCK.acquire()  # mark: manual-acquire
    try:
        return fetch_features(client, req)  # mark: manual-call
    finally:
        MODEL_LOCK.release()


def fetch_features(client, req):
    return client.get(req)  # mark: fetch


def score(features):
    return [f * 2 for f in features]  # mark: score


def postprocess(scores):
    return sorted(scores)  # mark: post
'''


@pytest.fixture()
def service(tmp_path: Path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVICE)
    source.clear()
    held_locks.clear()
    return path


def line(mark: str) -> int:
    return next(i for i, text in enumerate(SERVICE.splitlines(), 1) if f"# mark: {mark}" in text)


def in_handle(path, mark, *inner):
    return THREAD_ROOT + [py("worker", path, line("loop")), py("handle", path, line(mark)), *inner]


def convoy(path, holder_stack):
    """Five threads wait at the `with MODEL_LOCK:` line while one holds it in `holder_stack`."""
    threads = {tid: [(in_handle(path, "acquire", *LOCK_WAIT), 200)] for tid in range(1, 6)}
    threads[9] = [(holder_stack, 200)]
    return analysis(threads)


def test_a_holder_blocked_in_a_call_inside_the_with_block_is_named_in_the_first_advice(service):
    blocked = in_handle(service, "held-call", py("fetch_features", service, line("fetch")),
                        native("recv", LIBC))
    finding = lock_contention.run(convoy(service, blocked), SETTINGS)
    assert finding.advice[0].startswith(
        f"Move `fetch_features` out of the `with MODEL_LOCK:` block ({service.parent.name}/server.py:"
        f"{line('acquire')}): the lock's holder was blocked in `fetch_features` (waiting, not computing)")
    assert finding.evidence["fix"] == {"knob": "call_outside_lock", "value": "fetch_features"}


def test_a_holder_computing_inside_the_block_is_named_after_the_general_advice(service):
    computing = in_handle(service, "held-compute", py("score", service, line("score")))
    advice = lock_contention.run(convoy(service, computing), SETTINGS).advice
    assert advice[0] == SETTINGS.advice[0]
    assert advice[1].startswith("Move `score` out of the `with MODEL_LOCK:` block")
    assert "Do that work outside the lock" in advice[1]
    [fix] = lock_contention.run(convoy(service, computing), SETTINGS).fixes
    assert fix.knob == "model_instances"


def test_a_call_after_the_block_is_not_blamed_on_the_lock(service):
    after = in_handle(service, "after-block", py("postprocess", service, line("post")))
    advice = lock_contention.run(convoy(service, after), SETTINGS).advice
    assert not any(a.startswith("Move ") for a in advice)
    assert advice[0] == SETTINGS.advice[0]


def test_a_call_between_acquire_and_release_is_named_with_that_section(service):
    def manual(mark, *inner):
        return THREAD_ROOT + [py("worker", service, line("loop")), py("handle_manually", service, line(mark)),
                              *inner]
    threads = {tid: [(manual("manual-acquire", *LOCK_WAIT), 200)] for tid in range(1, 6)}
    threads[9] = [(manual("manual-call", py("fetch_features", service, line("fetch")),
                          native("recv", LIBC)), 200)]
    first = lock_contention.run(analysis(threads), SETTINGS).advice[0]
    assert first.startswith("Move `fetch_features` out of the section between `MODEL_LOCK.acquire()` "
                            "and its release")


def test_a_c_call_made_by_the_critical_section_itself_is_named_by_its_source_line(service):
    def sleeper(mark, *inner):
        return THREAD_ROOT + [py("worker", service, line("loop")), py("handle_sleeping", service, line(mark)),
                              *inner]
    threads = {tid: [(sleeper("sleep-acquire", *LOCK_WAIT), 200)] for tid in range(1, 6)}
    threads[9] = [(sleeper("sleep-call", native("time_sleep", "/usr/lib/libpython3.11.so.1.0"),
                           native("clock_nanosleep", LIBC)), 200)]
    first = lock_contention.run(analysis(threads), SETTINGS).advice[0]
    assert first.startswith("Move `time.sleep(0.005)` out of the `with MODEL_LOCK:` block"), first
